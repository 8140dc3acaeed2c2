"""Pages built by JavaScript, rendered in the system's Chromium (a crawl rule's ``render``).

A rule's ``render`` is ``never`` (the default: the HTML the server sends), ``always``, or
``auto`` (only the pages that need it). The package, one job a module:

- ``middleware``: ``BrowserRender``, the downloader middleware: which pages are
  rendered, and the comparison of a sampled page's two versions;
- ``policy``: ``render: auto``'s policy, learnt per page kind and shared by the cluster;
- ``pagegroups``: a page's kind, its URL template learnt per host;
- ``browser``: the process's Chromium, within its budget;
- ``assetcache``: what the browser keeps of a site's shared scripts, a shared HTTP cache;
- ``cache_rules``: RFC 9111's rules that cache follows;
- ``throttle``: the browser's own requests under the cluster throttle.
"""
