// crawlcluster web UI: four pages over the manager's JSON endpoints (Rules: rules.js).
"use strict";

const $ = (selector, root = document) => root.querySelector(selector);
const PROJECT = "crawlcluster";

async function getJSON(url) {
  const response = await fetch(url, { credentials: "same-origin" });
  return response.json();
}

async function postForm(url, fields) {
  const body = new URLSearchParams();
  for (const [key, value] of fields) body.append(key, value);
  const response = await fetch(url, { method: "POST", body, credentials: "same-origin" });
  return response.json();
}

async function postJSON(url, data) {
  const response = await fetch(url, {
    method: "POST", body: JSON.stringify(data), credentials: "same-origin",
    headers: { "Content-Type": "application/json" },
  });
  return response.json();
}

function cell(row, text) {
  const td = document.createElement("td");
  if (text instanceof Node) td.append(text); else td.textContent = text;
  row.append(td);
  return td;
}

function fillTable(table, rows) {
  const body = $("tbody", table);
  body.replaceChildren();
  for (const values of rows) {
    const row = document.createElement("tr");
    values.forEach((value) => cell(row, value));
    body.append(row);
  }
}

function showResult(element, ok, text) {
  element.className = "result " + (ok ? "ok" : "error");
  element.textContent = text;
}

// --- pages ---------------------------------------------------------------------------

const pages = { submit: null, rules: null, spiders: refreshJobs, status: refreshStatus,
                sites: refreshSites };
let timer = null;

function showPage() {
  const name = (location.hash || "#submit").slice(1);
  const page = name in pages ? name : "submit";
  document.querySelectorAll(".page").forEach((el) => el.classList.toggle("active", el.id === "page-" + page));
  document.querySelectorAll("nav a").forEach((el) => el.classList.toggle("active", el.dataset.page === page));
  clearInterval(timer);
  if (pages[page]) {
    pages[page]();
    timer = setInterval(pages[page], 2000);
  }
}

// --- Submit ------------------------------------------------------------------------------

function crawlRequest(form) {
  const data = new FormData(form);
  const request = {
    type: "crawl", url: data.get("url"), crawlid: data.get("crawlid"), userid: data.get("userid"),
    spider_type: data.get("spider_type"), maxdepth: Number(data.get("maxdepth")),
    priority: Number(data.get("priority")),
  };
  try {
    request.rule = JSON.parse(data.get("rule"));
  } catch (error) {
    throw { field: "rule", error: "not JSON: " + error.message };
  }
  if (data.get("cookie")) request.cookie = data.get("cookie");
  if (data.get("expires")) request.expires = Math.floor(new Date(data.get("expires")).getTime() / 1000);
  return data.get("cron") || data.get("every") ? scheduleRequest(request, data) : request;
}

// A crawl to repeat: a schedule of the crawl id's name; each run is a crawl of its own.
function scheduleRequest(crawl, data) {
  const { type, crawlid, userid, ...template } = crawl;
  const request = { type: "schedule", action: "add", schedule_id: crawlid, userid, crawl: template };
  if (data.get("cron")) request.cron = data.get("cron");
  if (data.get("every")) request.every = Number(data.get("every"));
  if (data.get("series")) request.series = true;
  return request;
}

function showFieldErrors(form, field, message) {
  form.querySelectorAll(".field-error").forEach((el) => { el.textContent = ""; });
  form.querySelectorAll(".invalid").forEach((el) => el.classList.remove("invalid"));
  if (!message) return;
  let name = (field || "").replace(/^crawl\./, "").split(/[.[]/)[0];
  if (name === "schedule_id") name = "crawlid";
  const slot = form.querySelector(`.field-error[data-for="${name}"]`) || $("#submit-result");
  slot.textContent = (field ? field + ": " : "") + message;
  const input = form.elements[name];
  if (input) input.classList.add("invalid");
}

async function checkForm(form) {
  let request;
  try {
    request = crawlRequest(form);
  } catch (problem) {
    showFieldErrors(form, problem.field, problem.error);
    return null;
  }
  const verdict = await postJSON("../validate.json", request);
  showFieldErrors(form, verdict.field, verdict.valid ? "" : verdict.error);
  return verdict.valid ? request : null;
}

function setUpSubmit() {
  const form = $("#crawl-form");
  let pending = null;
  form.addEventListener("input", () => {
    clearTimeout(pending);
    pending = setTimeout(() => checkForm(form), 400);
  });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const result = $("#submit-result");
    const request = await checkForm(form);
    if (!request) {
      showResult(result, false, "Fix the fields marked in red.");
      return;
    }
    showResult(result, true, "Sending through Kafka...");
    const answer = await postJSON("../submit.json", request);
    const reply = answer.reply || {};
    if (answer.status !== "ok" || reply.status === "error") {
      showFieldErrors(form, reply.field, reply.error);
      showResult(result, false, "Refused: " + (reply.error || answer.message));
    } else if (reply.action === "schedule") {
      showResult(result, true, `Scheduled ${reply.schedule_id}: first run ${reply.next_due}; each run is a crawl of id ${reply.schedule_id}-<time>`);
    } else {
      showResult(result, true, `Accepted crawl ${reply.crawlid} (${reply.spider_type}); uuid ${reply.uuid}`);
    }
  });
}

// --- Spiders -----------------------------------------------------------------------------

let nodes = {};

function nodeURL(node) {
  if (node.url && !node.url.includes("//0.0.0.0")) return node.url;
  const host = !node.bind_address || node.bind_address === "0.0.0.0" ? location.hostname : node.bind_address;
  return `${location.protocol}//${host}:${node.http_port}/`;
}

function runtime(job) {
  if (!job.start_time) return "";
  const start = new Date(job.start_time.replace(" ", "T"));
  const end = job.end_time ? new Date(job.end_time.replace(" ", "T")) : new Date();
  return Math.max(0, Math.round((end - start) / 1000)) + " s";
}

async function refreshJobs() {
  const cluster = await getJSON("../cluster.json");
  nodes = Object.fromEntries(Object.entries(cluster.nodes).filter(([, node]) => node.http_port));
  const select = $("#start-form select[name=node]");
  const chosen = select.value;
  select.replaceChildren(...Object.keys(nodes).map((name) => new Option(name, name)),
                         new Option("every node", EVERY_NODE));
  if (chosen in nodes || chosen === EVERY_NODE) select.value = chosen;
  const rows = [];
  const projects = new Set([PROJECT]);
  for (const [name, node] of Object.entries(nodes)) {
    const base = nodeURL(node);
    let jobs;
    try {
      // every project's jobs: ours, and projects deployed with scrapyd-deploy
      const deployed = (await getJSON(base + "listprojects.json")).projects || [];
      deployed.forEach((project) => projects.add(project));
      jobs = { pending: [], running: [], finished: [] };
      for (const project of new Set([PROJECT, ...deployed])) {
        const found = await getJSON(base + "listjobs.json?project=" + encodeURIComponent(project));
        for (const state of Object.keys(jobs)) {
          jobs[state].push(...(found[state] || []).map((job) => ({ ...job, project })));
        }
      }
    } catch (error) {
      rows.push([name, "(unreachable)", "", "", "", "", ""]);
      continue;
    }
    for (const state of ["pending", "running", "finished"]) {
      for (const job of jobs[state] || []) {
        const log = document.createElement("a");
        if (job.log_url) { log.href = base + job.log_url.replace(/^\//, ""); log.textContent = "log"; }
        let action = "";
        if (state !== "finished") {
          action = document.createElement("button");
          action.className = "stop";
          action.textContent = "Stop";
          action.dataset.job = job.id;
          action.onclick = async () => {
            await postForm(base + "cancel.json", [["project", job.project], ["job", job.id]]);
            refreshJobs();
          };
        }
        rows.push([name, job.id, job.spider, state, runtime(job), log, action]);
      }
    }
  }
  fillTable($("#jobs"), rows);
  fillProjects([...projects]);
  await refreshCrawlControl();
  const body = $("#jobs tbody");
  body.querySelectorAll("tr").forEach((row) => { row.dataset.job = row.children[1].textContent; row.dataset.state = row.children[3].textContent; });
}

// Download links for a crawl's stored items (the manager's export endpoint).
function exportLinks(crawlid) {
  const links = document.createElement("span");
  links.className = "exports";
  for (const format of ["jsonl", "csv", "parquet"]) {
    const link = document.createElement("a");
    link.href = `../export?crawlid=${encodeURIComponent(crawlid)}&format=${format}`;
    link.download = `${crawlid}.${format}`;
    link.className = "export-" + format;
    link.textContent = format.toUpperCase();
    links.append(link, " ");
  }
  return links;
}

async function refreshCrawlControl() {
  const overview = await getJSON("../overview.json");
  const rows = [];
  for (const [crawlid, progress] of Object.entries(overview.crawls)) {
    const state = progress.stopped ? "stopped" : progress.paused ? "paused" : "running";
    let action = "";
    if (!progress.stopped) {
      action = document.createElement("button");
      action.textContent = progress.paused ? "Resume" : "Pause";
      action.className = progress.paused ? "resume" : "pause";
      action.onclick = async () => {
        await postForm("../crawl.json", [["crawlid", crawlid], ["action", progress.paused ? "resume" : "pause"]]);
        refreshCrawlControl();
      };
    }
    rows.push([crawlid, progress.total_pending, (progress.counts || {}).done || 0, state, action, exportLinks(crawlid)]);
  }
  fillTable($("#crawl-control"), rows);
  $("#crawl-control tbody").querySelectorAll("tr").forEach((row) => {
    row.dataset.crawl = row.children[0].textContent;
    row.dataset.state = row.children[3].textContent;
  });
}

const EVERY_NODE = "*";

// The Project choice: every project deployed on some node; its spiders offered by name.
function fillProjects(projects) {
  const select = $("#start-form select[name=project]");
  const chosen = select.value;
  select.replaceChildren(...projects.sort().map((name) => new Option(name, name)));
  select.value = projects.includes(chosen) ? chosen : PROJECT;
}

async function fillSpiderNames(project) {
  const node = Object.values(nodes)[0];
  if (!node) return;
  const reply = await getJSON(nodeURL(node) + "listspiders.json?project=" + encodeURIComponent(project));
  $("#spider-names").replaceChildren(...(reply.spiders || []).map((name) => new Option(name)));
}

function setUpSpiders() {
  $("#start-form select[name=project]").addEventListener("change", (event) => fillSpiderNames(event.target.value));
  $("#start-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const data = new FormData(event.target);
    const chosen = data.get("node") === EVERY_NODE ? Object.keys(nodes) : [data.get("node")].filter((name) => name in nodes);
    const result = $("#start-result");
    if (!chosen.length) { showResult(result, false, "No node registered."); return; }
    const fields = [["project", data.get("project") || PROJECT], ["spider", data.get("spider")],
                    ["priority", data.get("priority") || "0"]];
    for (const pair of (data.get("args") || "").split(",")) {
      const [key, ...rest] = pair.split("=");
      if (key.trim()) fields.push([key.trim(), rest.join("=").trim()]);
    }
    // one schedule.json per node: the spider started on each (a long-running cluster job)
    const replies = await Promise.all(chosen.map((name) => postForm(nodeURL(nodes[name]) + "schedule.json", fields)));
    const refused = replies.filter((reply) => reply.status !== "ok");
    showResult(result, !refused.length, refused.length
      ? "Refused: " + refused.map((reply) => `${reply.node_name || "?"}: ${reply.message}`).join("; ")
      : replies.map((reply) => `Scheduled job ${reply.jobid} on ${reply.node_name}`).join("; "));
    refreshJobs();
  });
}

// --- Status ------------------------------------------------------------------------------

const history = {};   // node -> [pages per minute, ...] (last 60 samples)
const COLORS = ["#3b5bdb", "#2b8a3e", "#e8590c", "#9c36b5", "#c92a2a", "#0b7285"];

function drawLines(canvas, series) {
  const context = canvas.getContext("2d");
  const { width, height } = canvas;
  context.clearRect(0, 0, width, height);
  const values = Object.values(series).flat();
  const top = Math.max(10, ...values);
  context.fillStyle = "#556";
  context.font = "12px sans-serif";
  context.fillText(top.toFixed(0) + " pages/min", 6, 14);
  Object.entries(series).forEach(([name, points], index) => {
    context.strokeStyle = COLORS[index % COLORS.length];
    context.lineWidth = 2;
    context.beginPath();
    points.forEach((value, i) => {
      const x = (i / 59) * (width - 10) + 5;
      const y = height - 5 - (value / top) * (height - 25);
      if (i === 0) context.moveTo(x, y); else context.lineTo(x, y);
    });
    context.stroke();
    context.fillStyle = context.strokeStyle;
    points.forEach((value, i) => {    // a dot per sample: one sample shows too
      const x = (i / 59) * (width - 10) + 5;
      const y = height - 5 - (value / top) * (height - 25);
      context.fillRect(x - 2, y - 2, 4, 4);
    });
    context.fillText(name, width - 150, 16 + index * 14);
  });
}

function drawBars(canvas, counts) {
  const context = canvas.getContext("2d");
  const { width, height } = canvas;
  context.clearRect(0, 0, width, height);
  const entries = Object.entries(counts);
  const top = Math.max(1, ...entries.map(([, value]) => value));
  const slot = (width - 20) / Math.max(entries.length, 1);
  context.font = "12px sans-serif";
  entries.forEach(([code, value], index) => {
    const barHeight = (value / top) * (height - 40);
    context.fillStyle = code.startsWith("2") ? "#2b8a3e" : code.startsWith("3") ? "#3b5bdb" : "#c92a2a";
    context.fillRect(10 + index * slot + 4, height - 20 - barHeight, slot - 8, barHeight);
    context.fillStyle = "#334";
    context.fillText(`${code}: ${value}`, 10 + index * slot + 4, height - 5);
  });
}

// What became of a crawl's links, e.g. "41 found, 0 new, 41 refused (scope 41)".
function linksText(links) {
  const refused = Object.entries(links.refused || {}).sort((a, b) => b[1] - a[1]);
  const total = refused.reduce((sum, [, count]) => sum + count, 0);
  const reasons = refused.map(([reason, count]) => `${reason} ${count}`).join(", ");
  return `${links.found || 0} found, ${links.new || 0} new, ${total} refused` +
    (reasons ? ` (${reasons})` : "");
}

// The figures the exporter serves to Prometheus too (master/figures.py).
function frontierRows(overview) {
  const rows = Object.entries(overview.pool).map(([type, n]) => [`waiting (${type})`, n]);
  rows.push(["leased", overview.leased], ["hub pages", overview.hubs],
            ["monitor work", overview.monitor_work]);
  for (const [job, weight] of Object.entries(overview.weights)) {
    rows.push([`weight of ${job} (tasks/min)`, weight]);
  }
  const bloom = overview.bloom;
  rows.push(["Bloom filter", `${bloom.generations} generations, newest ${(100 * bloom.newest_share).toFixed(0)}% full, ~${Math.round(bloom.urls)} URLs, oldest ${Math.round(bloom.oldest_age / 3600)} h old, error now ${(100 * bloom.error_now).toFixed(3)}% (configured ${(100 * bloom.error_rate).toFixed(3)}%)`]);
  for (const [domain, n] of Object.entries(overview.throttle_refusals)) {
    rows.push([`throttled takes: ${domain}`, n]);
  }
  // Sites pushing back (429, 503, 403 bursts, block pages): the share of their limit
  // the cluster uses now, and the pause left.
  for (const [domain, state] of Object.entries(overview.pushback || {})) {
    const paused = state.paused_for > 0 ? `, paused ${Math.ceil(state.paused_for)} s` : "";
    const reason = state.reason ? ` (last: ${state.reason})` : "";
    rows.push([`pushback: ${domain}`, `rate x${state.factor.toFixed(2)}${paused}, ` +
               `${state.pushbacks} pushbacks${reason}`]);
  }
  return rows;
}

async function refreshStatus() {
  const overview = await getJSON("../overview.json");
  const nodeRows = [];
  for (const [name, node] of Object.entries(overview.nodes)) {
    history[name] = (history[name] || []).concat([node.pages_per_min]).slice(-60);
    nodeRows.push([name, node.jobs, node.pages_per_min]);
  }
  fillTable($("#nodes"), nodeRows);
  drawLines($("#pages-chart"), history);
  const crawlRows = [];
  for (const [crawlid, progress] of Object.entries(overview.crawls)) {
    const counts = progress.counts || {};
    const links = linksText(progress.links || {});
    const domains = Object.entries(progress.pending);
    if (!domains.length) crawlRows.push([crawlid, "(none pending)", 0, counts.done || 0, counts.failed || 0, links]);
    for (const [domain, pending] of domains) {
      crawlRows.push([crawlid, domain, pending, counts.done || 0, counts.failed || 0, links]);
    }
  }
  fillTable($("#crawls"), crawlRows);
  fillTable($("#frontier"), frontierRows(overview));
  const codes = {};
  for (const statuses of Object.values(overview.status_codes)) {
    for (const [code, counts] of Object.entries(statuses)) codes[code] = (codes[code] || 0) + counts.recent;
  }
  drawBars($("#codes-chart"), codes);
  const moduleRows = [];
  for (const [role, instances] of Object.entries(overview.modules)) {
    for (const [instance, beat] of Object.entries(instances)) {
      const state = document.createElement("span");
      state.className = beat.up ? "up" : "down";
      state.textContent = beat.up ? "up" : "down";
      moduleRows.push([role, instance, state, beat.last_beat + " s ago"]);
    }
  }
  fillTable($("#modules"), moduleRows);
}

// --- Sites -------------------------------------------------------------------------------

const siteSort = { column: "pages", descending: true };

function siteValue(site, column) {
  if (column.startsWith("coverage:")) return site.coverage[column.slice(9)] ?? -1;
  if (column === "pushback") return Object.values(site.pushback).reduce((a, b) => a + b, 0);
  if (column === "problems") return site.problems.length;
  return site[column];
}

function siteColumns(sites) {
  const fields = [...new Set(sites.flatMap((site) => Object.keys(site.coverage)))];
  return ["site", "pages", "errors", "pushback", "rendered", "items", "dropped",
          ...fields.map((name) => "coverage:" + name), "problems"];
}

function siteRow(site, columns) {
  const row = document.createElement("tr");
  row.dataset.site = site.site;
  if (site.problems.length) row.className = "unwell";
  for (const column of columns) {
    let value = siteValue(site, column);
    if (column.startsWith("coverage:")) value = value < 0 ? "-" : Math.round(value * 100) + "%";
    if (column === "problems") value = site.problems.join("; ");
    const td = cell(row, String(value));
    td.dataset.column = column;
    // what the cluster calls wrong (SiteHealth.problems) marks its cell
    const named = column.startsWith("coverage:") ? column.slice(9) + " coverage"
      : { errors: "of pages in errors", dropped: "of items dropped", pushback: "pushback" }[column];
    if (named && site.problems.some((problem) => problem.includes(named))) td.classList.add("bad");
  }
  return row;
}

async function refreshSites() {
  const crawlid = $("#sites-crawlid").value.trim();
  if (!crawlid) return;
  const answer = await getJSON("../sites.json?crawlid=" + encodeURIComponent(crawlid));
  const sites = answer.sites || [];
  const columns = siteColumns(sites);
  const { column, descending } = siteSort;
  sites.sort((a, b) => {
    const x = siteValue(a, column), y = siteValue(b, column);
    const order = x < y ? -1 : x > y ? 1 : 0;
    return descending ? -order : order;
  });
  const head = $("#sites thead tr");
  head.replaceChildren(...columns.map((name) => {
    const th = document.createElement("th");
    th.textContent = name.replace("coverage:", "") + (name === column ? (descending ? " ▼" : " ▲") : "");
    th.dataset.column = name;
    th.addEventListener("click", () => {
      // a first click shows the worst first: most pages, errors...; least coverage
      const worstLow = name === "site" || name.startsWith("coverage:");
      siteSort.descending = siteSort.column === name ? !siteSort.descending : !worstLow;
      siteSort.column = name;
      refreshSites();
    });
    return th;
  }));
  $("#sites tbody").replaceChildren(...sites.map((site) => siteRow(site, columns)));
}

// --- start ---------------------------------------------------------------------------------

async function start() {
  const status = await getJSON("../daemonstatus.json");
  $("#node-name").textContent = "node " + status.node_name;
  setUpSubmit();
  setUpSpiders();
  $("#sites-crawlid").addEventListener("change", refreshSites);
  const wanted = new URLSearchParams(location.search).get("crawlid");
  if (wanted) $("#sites-crawlid").value = wanted;
  window.addEventListener("hashchange", showPage);
  showPage();
}

start();
