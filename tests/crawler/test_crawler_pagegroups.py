"""URL templates learnt per host (crawler/render/pagegroups.py): pages of one kind share one,
whether their URLs vary by numbers, ids, slugs or words, and a site's sections stay
apart."""

from crawler.render.pagegroups import MAX_PLACES, VARIABLE_AT, UrlTemplates, segment_shape

AUTHORS = ("Albert-Einstein", "Jane-Austen", "Marilyn-Monroe", "Andre-Gide", "Mark-Twain",
           "Thomas-A-Edison")
TAGS = ("love", "life", "humor", "books", "inspirational", "friendship", "truth")


def test_pagegroups_numbers_ids_and_slugs_are_abstracted_by_their_shape():
    assert segment_shape("article-17.html") == "article-{n}.html"
    assert segment_shape("3f9c2a7be1d04c55") == "{id}"
    assert segment_shape("city-transport-rules-take-effect-today.html") == "{w}.html"
    assert segment_shape("love") == "love"                     # a word: learnt, not guessed
    templates = UrlTemplates()
    assert templates.template("http://a.example/app/article-3.html?x=1") == (
        "a.example/app/article-{n}.html")
    assert templates.template("http://a.example/2026/05/a-long-slug-title/") == (
        "a.example/{n}/{n}/{w}/")
    assert templates.template("http://a.example/") == "a.example/"


def test_pagegroups_a_word_that_varies_among_sibling_links_is_a_variable():
    templates = UrlTemplates()
    first = "http://q.example/author/Albert-Einstein/"
    assert templates.template(first) == "q.example/author/Albert-Einstein/"
    # a list page's links: authors and tags, as a quotes site's first page shows them
    templates.learn([f"http://q.example/author/{name}/" for name in AUTHORS]
                    + [f"http://q.example/tag/{tag}/page/1/" for tag in TAGS])
    assert templates.template(first) == "q.example/author/{w}/"
    assert templates.template("http://q.example/author/Someone-New/") == "q.example/author/{w}/"
    assert templates.template("http://q.example/author/") == "q.example/author/"
    assert templates.template("http://q.example/tag/unseen/page/3/") == (
        "q.example/tag/{w}/page/{n}/")
    assert sorted(templates.take_new_variables()) == ["q.example|author", "q.example|tag"]
    # what varies in one URL length varies in the others
    assert templates.template("http://q.example/author/Mark-Twain/page/2/") == (
        "q.example/author/{w}/page/{n}/")
    assert templates.take_new_variables() == []


def test_pagegroups_words_beside_slugs_are_short_titles():
    templates = UrlTemplates()
    templates.learn(["http://a.example/2026/05/city-opens-new-line/",
                     "http://a.example/2026/05/budget-vote/"])
    assert templates.template("http://a.example/2026/05/budget-vote/") == (
        "a.example/{n}/{n}/budget-vote/")
    templates.learn(["http://a.example/2026/06/storm/"])
    assert templates.template("http://a.example/2026/05/budget-vote/") == (
        "a.example/{n}/{n}/{w}/")


def test_pagegroups_few_values_or_the_first_segment_stay_literal():
    templates = UrlTemplates()
    # a site's sections: many, but the first segment names kinds of page
    sections = ("js", "tableful", "scroll", "login", "random", "search.aspx", "page")
    templates.learn([f"http://q.example/{name}/" for name in sections])
    assert templates.template("http://q.example/js/") == "q.example/js/"
    assert templates.template("http://q.example/tableful/") == "q.example/tableful/"
    # below it, fewer than VARIABLE_AT shapes: a list and its articles stay two kinds
    templates.learn([f"http://q.example/app/article-{n}.html" for n in range(50)]
                    + ["http://q.example/app/list.html"])
    assert templates.template("http://q.example/app/list.html") == "q.example/app/list.html"
    # a place is one host's, under one prefix
    templates.learn([f"http://q.example/author/{name}/" for name in AUTHORS])
    assert templates.template("http://r.example/author/Mark-Twain/") == (
        "r.example/author/Mark-Twain/")
    assert templates.template("http://q.example/about/Mark-Twain/") == (
        "q.example/about/Mark-Twain/")


def test_pagegroups_variables_learnt_elsewhere_are_taken_and_learning_is_bounded():
    here, there = UrlTemplates(), UrlTemplates()
    there.learn([f"http://q.example/tag/{tag}/" for tag in TAGS[:VARIABLE_AT]])
    here.add_variables(there.take_new_variables())
    assert here.template("http://q.example/tag/love/") == "q.example/tag/{w}/"
    bounded = UrlTemplates()
    bounded.learn([f"http://h{n}.example/a/b/" for n in range(MAX_PLACES + 10)])
    assert len(bounded.shapes) == MAX_PLACES


def test_pagegroups_what_a_long_running_spider_keeps_is_bounded():
    """A spider runs for months: the URLs a crawl's templates remember, and the crawls a
    process keeps templates of, are bounded."""
    from crawler.render.pagegroups import MAX_SEEN
    from crawler.render.policy import MAX_CRAWLS, RenderPlan
    from master.keys import Keys

    templates = UrlTemplates()
    for start in range(0, 3 * MAX_SEEN, 1000):
        templates.learn([f"http://a.example/p/{n}.html" for n in range(start, start + 1000)])
    assert len(templates.seen) <= MAX_SEEN + 1000
    plan = RenderPlan(None, Keys("t"))
    for n in range(3 * MAX_CRAWLS):
        plan._templates(f"crawl-{n}")
    assert len(plan.templates) == MAX_CRAWLS and f"crawl-{3 * MAX_CRAWLS - 1}" in plan.templates


def host_urls(hosts, start=0):
    """Each host's /a/<word>/ for ``VARIABLE_AT`` words: a variable per host."""
    return [f"http://h{n}.example/a/{tag}/" for n in range(start, start + hosts)
            for tag in TAGS[:VARIABLE_AT]]


def test_pagegroups_variables_are_bounded_learnt_or_given():
    learnt = UrlTemplates()
    learnt.learn(host_urls(MAX_PLACES + 50))
    assert len(learnt.variables) == MAX_PLACES
    assert len(learnt.take_new_variables()) == MAX_PLACES and not learnt.shapes
    given = UrlTemplates()
    given.add_variables([f"h{n}.example|a" for n in range(MAX_PLACES + 50)])
    assert len(given.variables) == MAX_PLACES


def test_pagegroups_30000_hosts_stay_bounded_in_redis_and_each_process_reads_what_is_new(
        redis, test_settings):
    """Two processes of one crawl: one learns the variables of 30,000 hosts; the list in
    Redis, and what each process holds, stay within MAX_PLACES, and the other process
    reads each variable once (a read with nothing new returns nothing)."""
    from crawler.render.policy import RenderPlan
    from master.keys import Keys

    keys = Keys.from_settings(test_settings)
    learner, reader = RenderPlan(redis, keys), RenderPlan(redis, keys)
    urls = host_urls(30_000)
    for start in range(0, len(urls), 5000):
        learner.learn("c1", urls[start:start + 5000])
    RenderPlan(redis, keys).learn("c1", host_urls(100, start=40_000))   # a third process
    shared = keys.crawl_render_variables("c1")
    assert redis.llen(shared) == MAX_PLACES
    assert len(learner.templates["c1"].variables) == MAX_PLACES
    reader.template("c1", "http://h1.example/a/love/")
    known = reader.templates["c1"]
    assert known.shared_read == MAX_PLACES and len(known.variables) == MAX_PLACES
    assert reader.template("c1", "http://h1.example/a/x/") == "h1.example/a/{w}/"
    # the next read asks for the entries past those read: none
    reader.patterns.clear()
    reader.template("c1", "http://h1.example/a/love/")
    assert known.shared_read == MAX_PLACES
    assert redis.lrange(shared, known.shared_read, -1) == []


def test_pagegroups_a_process_reads_only_the_variables_learnt_since_its_last_read(
        redis, test_settings):
    from crawler.render.policy import RenderPlan
    from master.keys import Keys

    keys = Keys.from_settings(test_settings)
    learner, reader = RenderPlan(redis, keys), RenderPlan(redis, keys)
    learner.learn("c1", host_urls(3))
    reader.template("c1", "http://h0.example/a/love/")
    assert reader.templates["c1"].shared_read == 3
    learner.learn("c1", host_urls(2, start=3))
    reader.patterns.clear()                                  # PLAN_FRESH has passed
    assert reader.template("c1", "http://h4.example/a/x/") == "h4.example/a/{w}/"
    assert reader.templates["c1"].shared_read == 5
    assert len(reader.templates["c1"].variables) == 5


def test_pagegroups_a_site_samples_its_bound_of_templates_then_follows_its_verdict(
        redis, test_settings):
    """The crawl's plan compares the first templates of a site, ``site_groups`` at most;
    the next template of that site goes the site's way at once, another site's is
    compared."""
    from crawler.render.policy import SAMPLE, RenderPlan
    from master.keys import Keys

    plan = RenderPlan(redis, Keys.from_settings(test_settings), site_groups=3)
    for depth in range(3):
        template = f"cal.example/cal/{'next/' * depth}"
        for _ in range(SAMPLE):
            assert plan.way("c1", template) == "compare"
            plan.compared("c1", template)
            plan.record("c1", template, needed=False)
    assert plan.way("c1", "cal.example/cal/next/next/next/") == "plain"
    assert plan.way("c1", "news.example/cal/next/next/next/") == "compare"
