"""A running server says which release and API it is (issue 26): GetStatus over a real port,
the Python client's status(), and the first log line."""

from orpheus_tts_client import Client
from orpheus_tts_client.proto.v1 import tts_pb2 as pb

import orpheus_svc


def test_get_status_reports_server_version_api_package_and_backend(stub):
    st = stub.GetStatus(pb.GetStatusRequest())
    assert st.server_version == orpheus_svc.__version__
    assert st.api_version == "orpheus.tts.v1"
    assert st.backend == "torch"


def test_the_client_s_status_carries_the_versions(server):
    with Client(server.addr) as client:
        st = client.status()
    assert (st.server_version, st.api_version) == (orpheus_svc.__version__, "orpheus.tts.v1")


def test_the_server_logs_its_version_when_it_starts(server):
    first = next(line for line in server.logs().splitlines() if "listening" in line)
    assert f"version={orpheus_svc.__version__}" in first or \
        f'"version": "{orpheus_svc.__version__}"' in first
    assert "orpheus.tts.v1" in first
