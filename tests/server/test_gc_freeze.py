"""After the warm-up, the start-up objects are frozen out of the cyclic collector's view
(gc.freeze): in Server.load and in the split topology's engine process."""

import threading

from orpheus_svc.config import load_config
from orpheus_svc.app import topology
from orpheus_svc.app import server as app

from tests.http.inproc import InProcessServer


def test_load_freezes_the_start_up_objects_after_the_warm_up(monkeypatch):
    seen = []
    srv = InProcessServer(**{"engine.max_sessions": 2, "engine.max_batch_size": 2})
    # recorded when called: warmed up (runtime set), not yet serving
    monkeypatch.setattr(app.gc, "freeze", lambda: seen.append(
        (srv.server.state.runtime is not None, srv.server.state.serving)))
    srv.start()
    try:
        assert seen == [(True, False)]
    finally:
        srv.stop()


def test_the_engine_process_freezes_after_its_warm_up(monkeypatch, tmp_path):
    calls = []
    order = []
    from orpheus_svc import runtime as runtime_module  # engine_main imports it when it runs
    build = runtime_module.build_runtime

    def build_spy(*a, **kw):
        rt = build(*a, **kw)
        warm = rt.warm_up
        rt.warm_up = lambda: order.append("warm_up") or warm()
        return rt

    monkeypatch.setattr(runtime_module, "build_runtime", build_spy)
    monkeypatch.setattr(topology.gc, "freeze", lambda: calls.append(1) or order.append("freeze"))
    monkeypatch.setattr(topology.signal, "signal", lambda *a: None)
    monkeypatch.setattr(topology, "_watch_parent", lambda on_gone: None)
    config = load_config(overrides={"engine.backend": "sim", "engine.max_sessions": 2,
                                    "engine.max_batch_size": 2, "server.log_level": "warning"})
    stop = threading.Event()
    stop.set()  # serve, then stop at once
    topology.engine_main(config, f"ipc://{tmp_path}/c", f"ipc://{tmp_path}/e", stop)
    assert calls == [1] and order == ["warm_up", "freeze"]
