"""Every query of the Grafana dashboard, its variables filled, returns at least one series
from a real Prometheus (Debian's) that scrapes a real sim-backend server under a short load
and evaluates the rules file; and a query naming a metric the server does not export fails
the same check. The metric names the dashboard and the rules use are all exported."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from orpheus_tts_client.proto.v1 import tts_pb2 as pb
from orpheus_tts_client.proto.v1 import tts_pb2_grpc

from tests.e2e.server_proc import free_port

ROOT = Path(__file__).resolve().parents[2]
OBS = ROOT / "deploy" / "observability"
JOB = "orpheus-svc"  # the job name the rules' up{} selector expects (docs/observability.md)
MISSING = "prometheus not found: run scripts/install-tools.sh (installs Debian's prometheus package)"


def _get(url: str) -> dict:
    return json.loads(urllib.request.urlopen(url, timeout=10).read())


class Prometheus:
    def __init__(self, workdir: Path, target: str) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.skip(MISSING)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = workdir / "prometheus.yml"
        config.write_text(json.dumps({  # YAML is a superset of JSON
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(OBS / "rules.yml")],
            "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": [target]}]}]}))
        self.log = open(workdir / "prometheus.log", "w")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)

    def query(self, expr: str) -> list:
        data = _get(f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        assert data["status"] == "success", data
        return data["data"]["result"]

    def wait(self, predicate, timeout: float = 60.0, what: str = "") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {Path(self.log.name).read_text()}")
            try:
                if predicate():
                    return
            except OSError:
                pass
            time.sleep(0.25)
        raise AssertionError(f"timed out waiting for {what}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def _load(srv, calls: int = 8) -> None:
    """A short load: `calls` concurrent streams of three sentences each."""
    stub = tts_pb2_grpc.TTSServiceStub(srv.channel)
    errors = []

    def one(i):
        def reqs():
            yield pb.StreamingSynthesizeRequest(config=pb.SynthesisConfig(voice="tara"))
            yield pb.StreamingSynthesizeRequest(text=f"Call {i} starts now. It says more, ")
            yield pb.StreamingSynthesizeRequest(text="and then a last sentence.")
        try:
            list(stub.StreamingSynthesize(reqs(), timeout=120))
        except Exception as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not errors, errors


def _targets() -> list[tuple[str, str]]:
    d = json.loads((OBS / "dashboard.json").read_text())
    return [(p["title"], t["expr"]) for p in d["panels"] for t in p.get("targets", [])]


def fill(expr: str, instance: str) -> str:
    """The query as Grafana sends it with the variables chosen."""
    return (expr.replace("$job", JOB).replace("$instance", instance)
            .replace("$__rate_interval", "1m"))


@pytest.fixture(scope="module")
def prometheus(observed, tmp_path_factory):
    target = f"127.0.0.1:{observed.metrics_port}"
    prom = Prometheus(tmp_path_factory.mktemp("prometheus"), target)
    try:
        prom.wait(lambda: prom.query(f'up{{job="{JOB}"}} == 1'), what="the first scrape")
        _load(observed)
        # the load's counters move between scrapes; the rules' windows see them
        prom.wait(lambda: prom.query(f'increase(orpheus_sessions_total{{job="{JOB}"}}[1m]) > 0')
                  and prom.query("instance:orpheus_engine_steps_past_real_time:ratio_5m"),
                  what="the load in the scraped series and the rules")
        prom.instance = target
        yield prom
    finally:
        prom.stop()


def test_every_panel_query_returns_a_series(prometheus):
    empty = [(title, fill(e, prometheus.instance)) for title, e in _targets()
             if not prometheus.query(fill(e, prometheus.instance))]
    assert not empty, f"panels whose query returns nothing: {empty}"


def test_the_variables_resolve_to_the_scraped_server(prometheus):
    def values(match: str, label: str) -> set:
        url = f"{prometheus.url}/api/v1/series?" + urllib.parse.urlencode({"match[]": match})
        return {s[label] for s in _get(url)["data"]}
    assert JOB in values("orpheus_serving", "job")
    assert prometheus.instance in values(f'orpheus_serving{{job=~"{JOB}"}}', "instance")


def test_a_query_on_a_metric_the_server_does_not_export_fails_the_check(prometheus):
    _, expr = next((t, e) for t, e in _targets() if "orpheus_time_to_first_audio_seconds" in e)
    wrong = expr.replace("orpheus_time_to_first_audio_seconds", "orpheus_time_to_first_audio_secs")
    assert prometheus.query(fill(expr, prometheus.instance))
    assert not prometheus.query(fill(wrong, prometheus.instance))


def test_every_metric_the_dashboard_and_rules_name_is_exported(observed):
    text = urllib.request.urlopen(f"http://127.0.0.1:{observed.metrics_port}/metrics",
                                  timeout=10).read().decode()
    exported = set(re.findall(r"^(orpheus_\w+?)(?:\{| )", text, re.M))
    rules = (OBS / "rules.yml").read_text()
    recorded = set(re.findall(r"record: (\S+)", rules))
    named = set()
    for _, expr in _targets():
        named |= set(re.findall(r"\b(?:[a-z]+:)?orpheus_\w+(?::\w+)?", expr))
    named |= set(re.findall(r"\b(?:[a-z]+:)?orpheus_\w+(?::\w+)?", rules.split("groups:", 1)[1]))
    unknown = sorted(n for n in named if n not in exported and n not in recorded)
    assert not unknown, f"not exported by the server: {unknown}"
