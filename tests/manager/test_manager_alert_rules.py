"""The shipped alert rules (docs/prometheus/alerts.yml) evaluated by promtool over
series as the exporter writes them: which fire, which stay quiet."""

import subprocess

import yaml

from manager.local.alerting import RULES
from manager.local.installs import require_program


def coverage_series(crawlid, site, field, coverage, items):
    """A site's field coverage and its items, one value a minute (promtool's notation)."""
    return [{"series": f'crawlcluster_site_field_coverage{{crawlid="{crawlid}",'
                       f'site="{site}",field="{field}"}}', "values": coverage},
            {"series": f'crawlcluster_site_items_total{{crawlid="{crawlid}",site="{site}"}}',
             "values": items}]


def fell_alert(crawlid, site, field, share):
    return {"exp_labels": {"severity": "warning", "crawlid": crawlid, "site": site,
                           "field": field},
            "exp_annotations": {
                "summary": f"{field} matches on {share} of {site}'s items in crawl {crawlid}",
                "description": f"`crawlcluster sites --crawlid {crawlid}` shows the site's "
                               "coverage of each field; `crawlcluster try` a page of the site "
                               "against the rule to see what the field's xpath finds now."}}


def test_site_field_coverage_low_fires_on_a_fall_not_on_a_field_never_had(tmp_path):
    """A field matching on every item, then on half after the layout changed, fires (and
    resolves an hour on); a field the site never had, or had only over a handful of
    items, does not."""
    promtool = require_program("promtool", "prometheus")
    series = (coverage_series("fell", "a.example", "title", "1x20 0.5x200", "20+1x220")
              + coverage_series("never", "b.example", "author", "0x220", "30+1x220")
              + coverage_series("few", "c.example", "title", "1x5 0.5x200", "3x5 30+1x200"))
    unit = {"rule_files": [str(RULES)], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": [
                {"eval_time": "35m", "alertname": "SiteFieldCoverageLow",
                 "exp_alerts": [fell_alert("fell", "a.example", "title", "50%")]},
                {"eval_time": "2h", "alertname": "SiteFieldCoverageLow", "exp_alerts": []}]}]}
    path = tmp_path / "coverage_test.yml"
    path.write_text(yaml.safe_dump(unit))
    result = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True,
                            text=True, check=False, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
