// The Rules page: a crawl rule built in a form or as JSON (each kept in step with the
// other), previewed on real pages through the manager's preview.json, fields made by
// picking an element of the page. Uses $ and postJSON from app.js.
"use strict";

const DEFAULT_RULES = {
  universal: { rules: [{ allow: ["/list/"], follow: true },
                       { allow: ["/news/\\d+\\.html"], follow: false, fields: {} }] },
  precise: { first_page_xpath: { list_from: "//ul/li", second_page_url: "a/@href", continue: true },
             second_page_xpath: {} },
};
const PRECISE_KEYWORDS = ["list_from", "second_page_url", "continue"];
let rule = structuredClone(DEFAULT_RULES.universal);
let lastPreview = null;       // the last preview shown: its result and request
let detailLinks = [];         // a precise list page's detail links, for "more pages"

const form = () => $("#rule-form");
const splitList = (text) => text.split("\n").map((s) => s.trim()).filter(Boolean);

// --- the form and the JSON, kept in step ---------------------------------------------------

const PROCESSORS = ["", "text", "date", "number", "price", "url"];   // a field's "as"

function fieldRow(name, expression) {
  // a field is an XPath string, or an object: a selector and its processors (its "as"
  // chosen here; attr, re, take and css kept as the JSON gives them)
  const spec = typeof expression === "string" ? { xpath: expression } : { ...expression };
  const row = document.createElement("div");
  row.className = "field-row";
  row.innerHTML = '<input class="field-name" placeholder="name"><input class="field-xpath" placeholder="XPath">' +
                  '<select class="field-as" title="processor: as">' +
                  PROCESSORS.map((as) => `<option value="${as}">${as ? "as " + as : "as is"}</option>`).join("") +
                  '</select><button type="button" class="stop remove-field">×</button>';
  $(".field-name", row).value = name;
  $(".field-xpath", row).value = spec.xpath ?? spec.css ?? "";
  $(".field-as", row).value = spec.as ?? "";
  delete spec.as;
  row.dataset.spec = JSON.stringify(spec);
  return row;
}

function fieldRows(container, fields, skip = []) {
  container.replaceChildren();
  for (const [name, expression] of Object.entries(fields || {})) {
    if (!skip.includes(name)) container.append(fieldRow(name, expression));
  }
  const add = document.createElement("button");
  add.type = "button";
  add.className = "add-field";
  add.textContent = "Add a field";
  container.append(add);
}

function readField(row) {
  const spec = JSON.parse(row.dataset.spec || "{}");
  const selector = $(".field-xpath", row).value.trim();
  spec["css" in spec ? "css" : "xpath"] = selector;
  const as = $(".field-as", row).value;
  if (as) spec.as = as;
  return Object.keys(spec).length === 1 && "xpath" in spec ? selector : spec;
}

function readFields(container) {
  const fields = {};
  container.querySelectorAll(".field-row").forEach((row) => {
    const name = $(".field-name", row).value.trim();
    if (name) fields[name] = readField(row);
  });
  return fields;
}

function linkRuleCard(linkRule, index) {
  const card = document.createElement("div");
  card.className = "link-rule";
  card.dataset.index = index;
  card.innerHTML = `<strong>Rule ${index}</strong>
    <label>Allow (a regex a line) <textarea class="allow" rows="2"></textarea></label>
    <label>Deny <textarea class="deny" rows="1"></textarea></label>
    <label>Domains <input class="allow_domains" placeholder="news.example, ..."></label>
    <label><span><input type="checkbox" class="follow"> follow its pages' links</span></label>
    <div class="fields"></div>
    <button type="button" class="stop remove-rule">Remove rule ${index}</button>`;
  $(".allow", card).value = (linkRule.allow || []).join("\n");
  $(".deny", card).value = (linkRule.deny || []).join("\n");
  $(".allow_domains", card).value = (linkRule.allow_domains || []).join(", ");
  $(".follow", card).checked = linkRule.follow ?? !Object.keys(linkRule.fields || {}).length;
  fieldRows($(".fields", card), linkRule.fields);
  return card;
}

function ruleToForm() {
  const f = form();
  const precise = f.elements.spider_type.value === "precise";
  $("#universal-parts").hidden = precise;
  $("#precise-parts").hidden = !precise;
  f.elements.render.value = typeof rule.render === "string" ? rule.render : "never";
  f.elements.required.value = (rule.required || []).join(", ");
  if (precise) {
    const first = rule.first_page_xpath || {};
    for (const name of ["list_from", "second_page_url"]) f.elements[name].value = first[name] || "";
    f.elements.next_page_xpath.value = rule.next_page_xpath || "";
    fieldRows($('.fields[data-step="list"]'), first, PRECISE_KEYWORDS);
    fieldRows($('.fields[data-step="detail"]'), rule.second_page_xpath);
  } else {
    $("#link-rules").replaceChildren(...(rule.rules || []).map(linkRuleCard));
  }
}

function formToRule() {
  const f = form();
  const built = {};
  if (f.elements.spider_type.value === "precise") {
    built.first_page_xpath = { list_from: f.elements.list_from.value.trim(), continue: true };
    if (f.elements.second_page_url.value.trim()) built.first_page_xpath.second_page_url = f.elements.second_page_url.value.trim();
    Object.assign(built.first_page_xpath, readFields($('.fields[data-step="list"]')));
    built.second_page_xpath = readFields($('.fields[data-step="detail"]'));
    if (f.elements.next_page_xpath.value.trim()) built.next_page_xpath = f.elements.next_page_xpath.value.trim();
  } else {
    built.rules = [...document.querySelectorAll(".link-rule")].map((card) => {
      const linkRule = { allow: splitList($(".allow", card).value), follow: $(".follow", card).checked };
      const deny = splitList($(".deny", card).value);
      const domains = $(".allow_domains", card).value.split(",").map((s) => s.trim()).filter(Boolean);
      const fields = readFields($(".fields", card));
      if (deny.length) linkRule.deny = deny;
      if (domains.length) linkRule.allow_domains = domains;
      if (Object.keys(fields).length) linkRule.fields = fields;
      return linkRule;
    });
  }
  const required = f.elements.required.value.split(",").map((s) => s.trim()).filter(Boolean);
  if (required.length) built.required = required;
  if (f.elements.render.value !== "never") built.render = f.elements.render.value;
  rule = built;
  showJSON();
}

function showJSON() {
  form().elements.rule_json.value = JSON.stringify(rule, null, 2);
  checkRule();
}

function crawlRequestOf() {
  const f = form();
  const request = { type: "crawl", userid: "web", url: f.elements.url.value.trim(),
                    spider_type: f.elements.spider_type.value, rule,
                    crawlid: f.elements.crawlid.value.trim() || "preview" };
  if (f.elements.maxdepth.value !== "") request.maxdepth = Number(f.elements.maxdepth.value);
  return request;
}

async function checkRule() {
  const verdict = await postJSON("../validate.json", crawlRequestOf());
  const slot = $('#rule-form .field-error[data-for="rule"]');
  slot.textContent = verdict.valid || !verdict.field || !verdict.field.startsWith("rule") ? "" : `${verdict.field}: ${verdict.error}`;
}

function setUpRuleForm() {
  const f = form();
  f.addEventListener("input", (event) => {
    if (event.target.name === "rule_json") {
      try {
        rule = JSON.parse(event.target.value);
      } catch (error) {
        $('#rule-form .field-error[data-for="rule"]').textContent = "not JSON: " + error.message;
        return;
      }
      ruleToForm();
      checkRule();
    } else if (event.target.name === "spider_type") {
      rule = structuredClone(DEFAULT_RULES[event.target.value]);
      ruleToForm();
      showJSON();
    } else if (!["url", "crawlid", "maxdepth"].includes(event.target.name)) {
      formToRule();
    }
  });
  f.addEventListener("change", (event) => { if (event.target.matches(".follow, .field-as")) formToRule(); });
  f.addEventListener("click", (event) => {
    const target = event.target;
    if (target.matches(".add-field")) target.before(fieldRow("", ""));
    else if (target.matches(".remove-field")) target.closest(".field-row").remove();
    else if (target.matches(".remove-rule")) target.closest(".link-rule").remove();
    else if (target.id === "add-link-rule") $("#link-rules").append(linkRuleCard({ allow: [], follow: true }, document.querySelectorAll(".link-rule").length));
    else return;
    formToRule();
  });
  $("#submit-rule").addEventListener("click", submitCrawl);
  ruleToForm();
  showJSON();
}

async function submitCrawl() {
  const result = $("#rule-submit-result");
  if (!form().elements.crawlid.value.trim()) {
    showResult(result, false, "Give the crawl an id.");
    return;
  }
  showResult(result, true, "Sending through Kafka...");
  const answer = await postJSON("../submit.json", crawlRequestOf());
  const reply = answer.reply || {};
  if (answer.status !== "ok" || reply.status === "error") {
    showResult(result, false, "Refused: " + (reply.field ? reply.field + ": " : "") + (reply.error || answer.message));
  } else {
    showResult(result, true, `Accepted crawl ${reply.crawlid} (${reply.spider_type}); uuid ${reply.uuid}`);
  }
}

// --- the preview -----------------------------------------------------------------------------

async function askPreview(url, step, withHTML) {
  const asked = { request: crawlRequestOf(), url: url || undefined, with_html: withHTML,
                  render: withHTML && Boolean(rule.render) };
  if (step) asked.step = step;
  return postJSON("../preview.json", asked);
}

async function runPreview() {
  const f = $("#preview-panel");
  const url = $("input[name=preview_url]", f).value.trim() || form().elements.url.value.trim();
  const step = $("select[name=step]", f).value;
  const result = $("#preview-result");
  showResult(result, true, "Fetching " + url + " ...");
  const answer = await askPreview(url, step, true);
  if (answer.status !== "ok") {
    showResult(result, false, (answer.field ? answer.field + ": " : "") + answer.message);
    return;
  }
  const shown = answer.preview;
  lastPreview = { shown, url, step };
  if (shown.step === "list") detailLinks = shown.links.filter((link) => link.step === "detail").map((link) => link.url);
  let render = shown.render.mode + ("looks_scripted" in shown.render ? (shown.render.looks_scripted ? ", looks filled in by scripts" : ", looks complete") : "");
  const changes = shown.render.rendered;
  if (changes && changes.error) render += "; " + changes.error;
  else if (changes) render += `; rendered, it adds ${changes.links_added.length} links and fills ${changes.fields_filled.join(", ") || "no field"}`;
  showResult(result, true, `${shown.status}, a ${shown.spider_type} rule's ${shown.step === "page" ? "" : shown.step + " "}page; ${shown.items.length} item(s); render: ${render}`);
  showFields(shown);
  showLinks(shown);
  showFramedPage(shown.html, shown.url);
  await previewMore();
}

function fieldsOf(shown) {
  // a page's item fields, or a precise list page's first element's
  if (shown.items.length) return Object.fromEntries(Object.entries(shown.items[0].fields).map(([name, field]) => [name, field]));
  const element = shown.links.find((link) => link.fields);
  return element ? Object.fromEntries(Object.entries(element.fields).map(([name, value]) => [name, value ? { value } : { value: "", missing: "matched nothing" }])) : {};
}

function showFields(shown) {
  const body = $("#preview-fields tbody");
  body.replaceChildren();
  for (const [name, field] of Object.entries(fieldsOf(shown))) {
    const row = document.createElement("tr");
    row.dataset.field = name;
    cell(row, name);
    const shownValue = typeof field.value === "string" ? field.value : JSON.stringify(field.value);
    const value = cell(row, field.missing ? field.missing : shownValue);
    if (field.missing) value.className = "missing";
    body.append(row);
  }
}

function showLinks(shown) {
  const counts = shown.link_counts;
  const refused = Object.entries(counts.refused).map(([why, n]) => `${why} ${n}`).join(", ");
  $("#link-counts").textContent = `${counts.found} links: ${counts.follow || 0} followed, ${counts.seen || 0} seen, ${counts.duplicate || 0} duplicate, refused: ${refused || "none"}`;
  $("#preview-links").replaceChildren(...shown.links.map((link) => {
    const item = document.createElement("li");
    item.className = "fate-" + link.fate;
    const why = link.reason || (link.rule !== undefined && link.rule !== null ? "rule " + link.rule : link.step || "");
    item.textContent = `${link.fate} ${why} ${link.url}`;
    return item;
  }));
}

function showFramedPage(html, url) {
  // Inert: no scripts (the sandbox), and nothing fetched from the site (the policy).
  const policy = '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'; img-src data:">';
  const base = `<base href="${url.replace(/"/g, "&quot;")}">`;
  $("#page-frame").srcdoc = policy + base + html;
}

function morePageURLs() {
  const shown = lastPreview.shown;
  if (shown.spider_type === "precise") return detailLinks.filter((url) => url !== shown.url).slice(0, 2);
  return shown.links.filter((link) => link.fate !== "refused" && link.rule === shown.rule_index && link.url !== shown.url)
    .map((link) => link.url).filter((url, n, all) => all.indexOf(url) === n).slice(0, 2);
}

async function previewMore() {
  if (!lastPreview) return;
  const { shown, step } = lastPreview;
  const urls = [shown.url, ...morePageURLs()];
  const results = await Promise.all(urls.map((url, n) => n === 0 ? { status: "ok", preview: shown } : askPreview(url, step, false)));
  const names = Object.keys(fieldsOf(shown));
  const table = $("#more-pages");
  $("thead tr", table).replaceChildren(...["page", ...names].map((name) => { const th = document.createElement("th"); th.textContent = name; return th; }));
  const body = $("tbody", table);
  body.replaceChildren();
  results.forEach((answer, n) => {
    const row = document.createElement("tr");
    row.dataset.url = urls[n];
    cell(row, urls[n]);
    const fields = answer.status === "ok" ? fieldsOf(answer.preview) : {};
    for (const name of names) {
      const field = fields[name] || { missing: answer.message || "no item" };
      const td = cell(row, field.missing ? field.missing : field.value);
      td.dataset.field = name;
      if (field.missing) td.className = "missing";
    }
    body.append(row);
  });
}

// --- picking an element ---------------------------------------------------------------------

const quoted = (text) => (text.includes("'") ? `"${text}"` : `'${text}'`);
const stableClasses = (el) => [...el.classList].filter((name) => !/\d{3,}|^(active|selected|hover|open)$/.test(name));

function count(doc, xpath) {
  try {
    return doc.evaluate(`count(${xpath})`, doc, null, XPathResult.NUMBER_TYPE, null).numberValue;
  } catch (error) {
    return 0;
  }
}

function stepOf(el) {
  const tag = el.tagName.toLowerCase();
  if (el.id && !/\d{3,}/.test(el.id)) return `${tag}[@id=${quoted(el.id)}]`;
  const classes = stableClasses(el);
  if (classes.length && el.getAttribute("class").trim() === classes[0]) return `${tag}[@class=${quoted(classes[0])}]`;
  if (classes.length) return `${tag}[contains(concat(' ', normalize-space(@class), ' '), ' ${classes[0]} ')]`;
  return null;
}

function positionOf(el) {
  const tag = el.tagName.toLowerCase();
  const same = [...el.parentElement.children].filter((other) => other.tagName === el.tagName);
  return same.length > 1 ? `${tag}[${same.indexOf(el) + 1}]` : tag;
}

function suggestXPath(el) {
  // ids and stable classes first, then an anchored ancestor, positions only as a last resort
  const doc = el.ownerDocument;
  const own = stepOf(el);
  if (own && count(doc, "//" + own) === 1) return "//" + own;
  const tag = el.tagName.toLowerCase();
  if (count(doc, "//" + tag) === 1) return "//" + tag;
  let path = own || positionOf(el);
  for (let anchor = el.parentElement; anchor && anchor !== doc.documentElement; anchor = anchor.parentElement) {
    const anchored = stepOf(anchor);
    if (anchored && count(doc, `//${anchored}//${path}`) === 1) return `//${anchored}//${path}`;
    path = positionOf(anchor) + "/" + path;
  }
  return "/html/" + path;
}

function suggestCSS(el) {
  const tag = el.tagName.toLowerCase();
  if (el.id) return `${tag}#${CSS.escape(el.id)}`;
  const classes = stableClasses(el);
  return classes.length ? `${tag}.${classes.map((name) => CSS.escape(name)).join(".")}` : tag;
}

function valueXPath(el, xpath) {
  const ownText = [...el.childNodes].some((node) => node.nodeType === Node.TEXT_NODE && node.textContent.trim());
  return xpath + (ownText ? "/text()" : "//text()");
}

function selects(doc, xpath) {
  let found;
  try {
    found = doc.evaluate(xpath, doc, null, XPathResult.ORDERED_NODE_SNAPSHOT_TYPE, null);
  } catch (error) {
    return "not an XPath: " + error.message;
  }
  const values = [];
  for (let n = 0; n < found.snapshotLength; n++) values.push(found.snapshotItem(n).textContent.trim());
  const text = values.filter(Boolean).join(" | ");
  return `selects ${found.snapshotLength} on this page: ${text.slice(0, 200) || "(no text)"}`;
}

function startPicking() {
  const doc = $("#page-frame").contentDocument;
  if (!doc || !doc.body) return;
  $("#pick-hint").textContent = "click an element of the page";
  const outline = (event, on) => { event.target.style.outline = on ? "2px solid #3b5bdb" : ""; };
  const over = (event) => outline(event, true);
  const out = (event) => outline(event, false);
  const pick = (event) => {
    event.preventDefault();
    event.stopPropagation();
    outline(event, false);
    doc.removeEventListener("mouseover", over, true);
    doc.removeEventListener("mouseout", out, true);
    doc.removeEventListener("click", pick, true);
    const xpath = valueXPath(event.target, suggestXPath(event.target));
    const panel = $("#pick-panel");
    panel.hidden = false;
    $("input[name=pick_xpath]", panel).value = xpath;
    $("input[name=pick_css]", panel).value = suggestCSS(event.target);
    $("#pick-selects").textContent = selects(doc, xpath);
    $("#pick-hint").textContent = "";
  };
  doc.addEventListener("mouseover", over, true);
  doc.addEventListener("mouseout", out, true);
  doc.addEventListener("click", pick, true);
}

async function addPicked() {
  const panel = $("#pick-panel");
  const name = $("input[name=pick_name]", panel).value.trim();
  const xpath = $("input[name=pick_xpath]", panel).value.trim();
  if (!name || !xpath || !lastPreview) return;
  const shown = lastPreview.shown;
  if (shown.spider_type === "precise") {
    const part = shown.step === "detail" ? "second_page_xpath" : "first_page_xpath";
    rule[part] = { ...(rule[part] || {}), [name]: xpath };
  } else {
    const index = shown.rule_index ?? rule.rules.length - 1;
    rule.rules[index].fields = { ...(rule.rules[index].fields || {}), [name]: xpath };
  }
  ruleToForm();
  showJSON();
  $("input[name=pick_name]", panel).value = "";
  panel.hidden = true;
  await runPreview();
}

function setUpRules() {
  setUpRuleForm();
  $("#preview-button").addEventListener("click", runPreview);
  $("#pick-button").addEventListener("click", startPicking);
  $("#add-picked").addEventListener("click", addPicked);
  $("input[name=pick_xpath]").addEventListener("input", (event) => {
    const doc = $("#page-frame").contentDocument;
    if (doc) $("#pick-selects").textContent = selects(doc, event.target.value);
  });
}

setUpRules();
