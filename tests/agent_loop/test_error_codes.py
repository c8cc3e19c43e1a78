"""The agent loop's errors join the HarnessError hierarchy and route on ErrorCode."""

from __future__ import annotations

from dsh.agent_loop import RetryPolicy, SessionLogError
from dsh.agent_loop.jsonrpc import ProtocolError, TransportClosed
from dsh.llm import ErrorCode, HarnessError, LlmError


def test_the_retry_policy_routes_on_the_enum_and_on_plain_strings_read_back() -> None:
    policy = RetryPolicy()
    assert policy.should_retry(ErrorCode.SERVER, 0) and policy.should_retry("SERVER", 0)
    assert not policy.should_retry(ErrorCode.AUTH, 0) and not policy.should_retry("HTTP_418", 0)


def test_protocol_failures_are_harness_errors_with_codes() -> None:
    protocol = ProtocolError("bad frame", rpc_code=-32700, data={"x": 1})
    assert isinstance(protocol, HarnessError) and protocol.code == ErrorCode.PROTOCOL
    assert (protocol.rpc_code, protocol.data, str(protocol)) == (-32700, {"x": 1}, "bad frame")
    closed = TransportClosed()
    assert isinstance(closed, HarnessError) and closed.code == ErrorCode.TRANSPORT_CLOSED
    assert str(closed) == "JSON-RPC transport closed"
    log = SessionLogError("disk full")
    assert isinstance(log, HarnessError) and log.code == ErrorCode.SESSION_LOG
    assert LlmError("m", ErrorCode.QUOTA, status=402).code == "QUOTA"


def test_a_failure_can_cap_its_own_retries_below_the_policy() -> None:
    policy = RetryPolicy(max_retries=5)
    assert policy.should_retry(ErrorCode.TIMEOUT, 0, limit=1) and not policy.should_retry(ErrorCode.TIMEOUT, 1, limit=1)
    assert not policy.should_retry(ErrorCode.TRANSPORT, 0, limit=0)
    assert policy.attempts_for(None) == 5 and policy.attempts_for(1) == 1 and policy.attempts_for(9) == 5
