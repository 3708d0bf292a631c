#!/usr/bin/python3
"""Checks the Grafana dashboard deploy/grafana/dashboards/convserve.json.

  dashboard_check.py --dashboard JSON --metrics_source server/server_metrics.cc \
      --exposition METRICS.txt
      The dashboard is valid JSON Grafana can provision (ids, grid, targets,
      variables), and every convserve_* name in a panel query or variable is
      a metric the server exports: named in the exporting code (histograms
      with their _bucket/_sum/_count series) and present on a live /metrics
      page (METRICS.txt, fetched after traffic) unless it exists only on GPUs.
  dashboard_check.py --dashboard JSON --prometheus_url http://127.0.0.1:PORT
      Every panel query and variable query, with Grafana's variables filled
      in, runs on that Prometheus without error and, unless it shows a GPU-only
      metric, returns data.

Both modes may be given together. Prints one line per check and a summary;
exits 1 when any check failed. Standard library only.
"""

import argparse
import json
import re
import sys
import urllib.parse
import urllib.request

# Exported only by the GPU backend (server_metrics.cc adds them for GPU
# devices), so a CPU server's page lacks them.
GPU_ONLY = {
    "convserve_gpu_memory_used_bytes", "convserve_gpu_memory_total_bytes",
    "convserve_gpu_faults_total", "convserve_gpu_healthy", "convserve_gpu_launched_ahead_total",
    "convserve_engine_searches_total",
    "convserve_engine_prober_starts_total", "convserve_engine_candidates_quarantined_total",
    "convserve_engine_candidates_vetoed_total", "convserve_engine_choices_from_store_total",
    "convserve_cuda_graph_captures_total", "convserve_cuda_graph_replays_total",
    "convserve_cuda_graph_capture_fallbacks_total",
    "convserve_cuda_graph_invalidations_total", "convserve_cached_cuda_graphs",
    "convserve_cuda_graph_variant_waits_total",
    "convserve_pointwise_pair_races_total", "convserve_pointwise_pairs_fused_total",
}

# What the dashboard must show (issue 5): latency quantiles from the
# histograms, throughput and errors, the plan cache hit ratio, plan builds,
# queue depth and GPU memory per GPU.
REQUIRED = {
    "convserve_request_duration_seconds_bucket": "end-to-end latency quantiles",
    "convserve_queue_duration_seconds_bucket": "queue wait quantiles",
    "convserve_compute_duration_seconds_bucket": "compute quantiles",
    "convserve_requests_total": "throughput and errors",
    "convserve_plan_cache_hits_total": "plan cache hit ratio",
    "convserve_plan_cache_misses_total": "plan cache hit ratio",
    "convserve_plan_builds_total": "plan builds",
    "convserve_queue_depth": "queue depth per GPU",
    "convserve_gpu_memory_used_bytes": "GPU memory per GPU",
}

HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")
METRIC = re.compile(r"\bconvserve_[a-z0-9_]+\b")
VARIABLE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")
# Grafana's built-in intervals, as they would be on a short dashboard range.
BUILTINS = {"__rate_interval": "1m", "__interval": "1m", "__range": "1h"}


class Checks:
    def __init__(self):
        self.failed = 0
        self.passed = 0

    def check(self, ok, name, detail="", always=False):
        """Counts and prints one check; `detail` shows on failure, or always."""
        detail = detail if (always or not ok) else ""
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        print("%s %s%s" % ("PASS" if ok else "FAIL", name, (": " + detail) if detail else ""),
              flush=True)
        return ok


def all_panels(dashboard):
    """Top-level panels and those inside (collapsed) rows."""
    for panel in dashboard.get("panels", []):
        yield panel
        for inner in panel.get("panels", []) or []:
            yield inner


def queries(dashboard):
    """(where, expr) for every panel target and every query variable."""
    for panel in all_panels(dashboard):
        for target in panel.get("targets", []) or []:
            yield "panel %r %s" % (panel.get("title"), target.get("refId")), target.get("expr", "")
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable.get("query")
            if isinstance(query, dict):
                query = query.get("query", "")
            yield "variable $%s" % variable.get("name"), query


def check_structure(checks, dashboard):
    checks.check(isinstance(dashboard.get("uid"), str) and dashboard["uid"] != "",
                 "dashboard has a fixed uid", repr(dashboard.get("uid")), always=True)
    checks.check(bool(dashboard.get("title")), "dashboard has a title")
    checks.check(isinstance(dashboard.get("schemaVersion"), int), "dashboard has a schemaVersion")
    panels = list(all_panels(dashboard))
    ids = [p.get("id") for p in panels]
    checks.check(len(ids) == len(set(ids)) and all(isinstance(i, int) for i in ids),
                 "panel ids are unique integers", str(ids), always=True)
    variables = {v.get("name") for v in dashboard.get("templating", {}).get("list", [])}
    problems = []
    shown = 0
    for panel in panels:
        title = panel.get("title")
        grid = panel.get("gridPos", {})
        if not all(isinstance(grid.get(k), int) for k in ("h", "w", "x", "y")):
            problems.append("%r: gridPos needs integer h, w, x, y" % title)
        elif grid["x"] < 0 or grid["x"] + grid["w"] > 24:
            problems.append("%r: gridPos leaves the 24 columns" % title)
        if panel.get("type") == "row":
            continue
        shown += 1
        if not title:
            problems.append("panel %s has no title" % panel.get("id"))
        targets = panel.get("targets") or []
        if not targets:
            problems.append("%r has no query" % title)
        refs = [t.get("refId") for t in targets]
        if len(refs) != len(set(refs)) or not all(refs):
            problems.append("%r: refIds must be set and unique: %s" % (title, refs))
        for target in targets:
            if not target.get("expr", "").strip():
                problems.append("%r %s: empty expr" % (title, target.get("refId")))
            datasource = target.get("datasource", panel.get("datasource")) or {}
            if datasource.get("uid") not in ("${datasource}", "$datasource", "prometheus"):
                problems.append("%r: data source %r is neither $datasource nor the provisioned "
                                "uid 'prometheus'" % (title, datasource))
    for where, expr in queries(dashboard):
        for match in VARIABLE.finditer(expr):
            name = match.group(1) or match.group(2)
            if name in BUILTINS:
                continue
            if name not in variables:
                problems.append("%s uses undefined variable $%s" % (where, name))
            # Multi-value variables expand to a regex: only =~ takes one.
            before = expr[:match.start()]
            if not re.search(r'=~\s*"$', before):
                problems.append('%s: $%s must be used as label=~"$%s"' % (where, name, name))
    checks.check(not problems, "%d panels are well formed (grid, titles, targets, data "
                 "source, variables)" % shown, "; ".join(problems))


def exported_from_source(path):
    """Metric names in the exporting code, histograms with their series."""
    with open(path, encoding="utf-8") as f:
        source = f.read()
    names = set(re.findall(r'"(convserve_[a-z0-9_]+)"', source))
    histograms = set(re.findall(r'histogram\(\s*"(convserve_[a-z0-9_]+)"', source))
    return names, histograms


def exported_from_page(path):
    """Families (name -> type) and sample names of a text exposition."""
    families, samples = {}, set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split(None, 3)
                families[name] = kind
            elif line and not line.startswith("#"):
                samples.add(re.split(r"[{\s]", line, 1)[0])
    # prometheus-cpp's Exposer adds its own exposer_* families; only ours count.
    families = {n: k for n, k in families.items() if METRIC.fullmatch(n)}
    return families, {n for n in samples if METRIC.fullmatch(n)}


def series_names(families, histograms):
    """Every series name the families expose."""
    names = set()
    for name in families:
        names.add(name)
        if name in histograms:
            names.update(name + suffix for suffix in HISTOGRAM_SERIES)
    return names


def check_names(checks, dashboard, source_path, page_path):
    source_names, source_histograms = exported_from_source(source_path)
    page_families, page_samples = exported_from_page(page_path)
    checks.check(bool(source_names), "found metric names in %s" % source_path,
                 "%d: %s" % (len(source_names), ", ".join(sorted(source_names))), always=True)
    page_histograms = {n for n, kind in page_families.items() if kind == "histogram"}
    histograms = source_histograms | page_histograms
    checks.check(page_histograms <= source_histograms,
                 "the page's histograms are the code's histograms",
                 "not found as histogram(...) in the code: %s"
                 % sorted(page_histograms - source_histograms))
    checks.check(set(page_families) <= source_names,
                 "every family on the live page is named in the code",
                 "only on the page: %s (the code may build names another way; teach "
                 "dashboard_check.py)" % sorted(set(page_families) - source_names))
    missing = source_names - set(page_families) - GPU_ONLY
    checks.check(not missing, "every family the code names is on the live page (GPU-only "
                 "ones aside)", "not on the page: %s" % sorted(missing))

    exported = series_names(source_names, histograms)
    live = page_samples | {n for n in page_families}
    used = {}
    for where, expr in queries(dashboard):
        for name in METRIC.findall(expr):
            used.setdefault(name, set()).add(where)
    unknown = {n: sorted(w) for n, w in used.items() if n not in exported}
    checks.check(not unknown, "every metric a query names is exported by the code",
                 "; ".join("%s in %s" % (n, ", ".join(w)) for n, w in sorted(unknown.items())))
    base = {n: next((n[:-len(s)] for s in HISTOGRAM_SERIES
                     if n.endswith(s) and n[:-len(s)] in histograms), n) for n in used}
    not_live = sorted(n for n in used if n not in live and base[n] not in GPU_ONLY)
    checks.check(not not_live, "every metric a query names is on the live page (GPU-only "
                 "ones aside)", ", ".join(not_live))
    uncovered = sorted("%s (%s)" % (n, why) for n, why in REQUIRED.items() if n not in used)
    checks.check(not uncovered, "the dashboard shows what issue 5 asks for",
                 "no query uses: " + ", ".join(uncovered))
    exprs = [expr for _, expr in queries(dashboard)]
    checks.check(any("histogram_quantile" in e and "convserve_request_duration_seconds_bucket" in e
                     for e in exprs), "request latency quantiles come from the histogram")
    checks.check(any(re.search(r'code\s*!=\s*"OK"', e) for e in exprs),
                 'errors are the requests with code!="OK"')
    unshown = sorted(n for n in source_names if not any(
        u == n or base.get(u) == n for u in used))
    print("INFO %d of %d exported families are on the dashboard%s" % (
        len(source_names) - len(unshown), len(source_names),
        ("; not shown: " + ", ".join(unshown)) if unshown else ""))


def fill_variables(expr):
    """Grafana's variables as a dashboard showing everything would set them."""
    def replace(match):
        name = match.group(1) or match.group(2)
        return BUILTINS.get(name, ".*")
    return VARIABLE.sub(replace, expr)


def as_promql(expr):
    """label_values(metric, label), a Grafana variable function, as PromQL."""
    match = re.fullmatch(r"\s*label_values\(\s*(.+?)\s*,\s*(\w+)\s*\)\s*", expr)
    return "count by (%s) (%s)" % (match.group(2), match.group(1)) if match else expr


def check_on_prometheus(checks, dashboard, url):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, no proxy
    for where, expr in queries(dashboard):
        promql = as_promql(fill_variables(expr))
        query = url.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        try:
            with opener.open(query, timeout=10) as response:
                answer = json.load(response)
        except Exception as e:  # noqa: BLE001 - HTTPError carries Prometheus's message
            body = e.read().decode(errors="replace") if hasattr(e, "read") else ""
            checks.check(False, "%s runs on Prometheus" % where, "%s: %s %s" % (promql, e, body))
            continue
        result = answer.get("data", {}).get("result", [])
        gpu_only = set(METRIC.findall(promql)) & GPU_ONLY
        ok = answer.get("status") == "success" and (bool(result) or bool(gpu_only))
        checks.check(ok, "%s runs on Prometheus" % where,
                     "%d series%s" % (len(result), " (GPU-only, none on this server)"
                                      if not result and gpu_only else "")
                     if ok else "%s -> %s" % (promql, json.dumps(answer)[:500]), always=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dashboard", required=True)
    parser.add_argument("--metrics_source", help="server/server_metrics.cc")
    parser.add_argument("--exposition", help="a /metrics page fetched after traffic")
    parser.add_argument("--prometheus_url", help="a Prometheus that scraped the server")
    args = parser.parse_args()
    if bool(args.metrics_source) != bool(args.exposition):
        parser.error("--metrics_source and --exposition go together")
    checks = Checks()
    try:
        with open(args.dashboard, encoding="utf-8") as f:
            dashboard = json.load(f)
    except (OSError, ValueError) as e:
        checks.check(False, "%s loads as JSON" % args.dashboard, str(e))
        return 1
    checks.check(isinstance(dashboard, dict), "%s loads as a JSON object" % args.dashboard)
    check_structure(checks, dashboard)
    if args.metrics_source:
        check_names(checks, dashboard, args.metrics_source, args.exposition)
    if args.prometheus_url:
        check_on_prometheus(checks, dashboard, args.prometheus_url)
    print("dashboard_check: %d passed, %d failed" % (checks.passed, checks.failed))
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
