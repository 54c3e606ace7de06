"""The alert rules shipped in contrib/prometheus/: ``promtool check rules`` (syntax, and what
Prometheus's own linter says) and ``promtool test rules`` with the cases each alert is for
(contrib/prometheus/affmon-rules.test.yml): an exporter that stops answering fires
``AffmonExporterDown``; a healthy exporter scraped every 60 s, whose newest sample is up to a
scrape interval old, fires nothing; a sampler that stops fires ``AffmonExporterStuck``; a
starved job fires ``AffmonJobStarvedOfCpu`` once per finding (not per scrape job), after its
10 minutes. promtool is Debian's,
as tests/run unpacks it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.helpers.prom import binary

RULES = Path(__file__).resolve().parent.parent.parent / "contrib" / "prometheus"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([binary("promtool"), *args], cwd=RULES, capture_output=True, text=True, timeout=60)


def test_the_rules_file_is_valid():
    checked = promtool("check", "rules", "affmon-rules.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 16 rules found" in checked.stdout


def test_each_alert_fires_where_it_should_and_nowhere_else():
    tested = promtool("test", "rules", "affmon-rules.test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_the_age_of_the_last_sample_is_no_sign_of_a_stuck_exporter(tmp_path):
    """The rule the docs gave before, ``time() - affmon_export_last_sample_timestamp_seconds > 60``,
    fires on the healthy exporter of affmon-rules.test.yml, scraped every 60 s: the exporter
    samples at the scrape pace, so the sample it serves is up to a scrape interval old when
    scraped, and older still when the rule is evaluated between two scrapes (here 89 s, the
    sample taken 59 s before a scrape, the rule evaluated 30 s after). The shipped rule judges
    by progress instead."""
    shipped = (RULES / "affmon-rules.yml").read_text()
    progress = "changes(affmon_export_samples_total[10m]) == 0 and on (job, instance) up == 1"
    assert progress in shipped and "affmon_export_last_sample_timestamp_seconds" not in shipped
    (tmp_path / "old-rules.yml").write_text(
        shipped.replace(progress, "time() - affmon_export_last_sample_timestamp_seconds > 60")
    )
    healthy = {"new": "affmon-rules.yml", "old": "old-rules.yml"}
    for which, rules in healthy.items():
        (tmp_path / f"{which}.test.yml").write_text(
            f"rule_files: [{RULES / rules if which == 'new' else tmp_path / rules}]\n"
            "evaluation_interval: 1m\n"
            "tests:\n"
            "  - interval: 1m\n"
            "    input_series:\n"
            '      - series: \'up{job="affmon", instance="n1"}\'\n'
            "        values: 1x40\n"
            '      - series: \'affmon_export_samples_total{job="affmon", instance="n1"}\'\n'
            "        values: 0+1x40\n"
            '      - series: \'affmon_export_last_sample_timestamp_seconds{job="affmon", instance="n1"}\'\n'
            "        values: -89+60x40\n"
            "    alert_rule_test:\n"
            "      - eval_time: 30m\n"
            "        alertname: AffmonExporterStuck\n"
            "        exp_alerts: []\n"
        )
    new = subprocess.run(
        [binary("promtool"), "test", "rules", str(tmp_path / "new.test.yml")], capture_output=True, text=True
    )
    old = subprocess.run(
        [binary("promtool"), "test", "rules", str(tmp_path / "old.test.yml")], capture_output=True, text=True
    )
    assert new.returncode == 0, new.stdout + new.stderr
    assert old.returncode != 0 and "AffmonExporterStuck" in old.stdout + old.stderr, old.stdout + old.stderr
