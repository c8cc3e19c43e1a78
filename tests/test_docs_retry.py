"""The docs' account of which failures are retried is the code's (issue 42 item 2; docs/reliability.md,
"Which failures before a response are retried").

docs/retry_table.py asks the client and the retry policy about real exceptions; this compares its table and
sentence with the regions checked in (fast: no dsh runs), and the error-codes table's TRANSPORT and PROXY
rows with the codes some of whose failures are not retried.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "docs"))

import retry_table  # noqa: E402  # docs/, beside the generator that writes its regions


def _region(document: str, name: str) -> str:
    text = (REPO / document).read_text(encoding="utf-8")
    match = re.search(rf"<!-- table: {name} -->\n(.*?)<!-- /table -->", text, re.S)
    assert match, f"{document} has no region {name!r}"
    return match.group(1)


def test_the_reliability_table_is_what_the_client_and_the_retry_policy_decide() -> None:
    assert _region("docs/reliability.md", "retried") == retry_table.markdown()


def test_the_readme_sentence_names_every_failure_that_is_not_retried() -> None:
    assert _region("README.md", "retry-summary") == retry_table.summary()


def test_a_name_that_does_not_exist_a_certificate_and_plain_http_are_not_retried_and_a_refusal_is() -> None:
    retried = {what: yes for what, _, _, yes in retry_table.outcomes()}
    assert not retried["the host name does not exist (NXDOMAIN)"]
    assert not retried["the certificate's issuer is not trusted"]
    assert not retried["https to a plain-HTTP server"]
    assert retried["connection refused"]
    assert retried["the host name could not be resolved (SERVFAIL, no answer, no network)"]


def test_the_error_code_table_does_not_say_every_transport_failure_is_retried() -> None:
    capped = {code for _, code, _, yes in retry_table.outcomes() if not yes}
    rows = {row.split("|")[1].strip(" `"): row.split("|")[3].strip()
            for row in _region("docs/architecture.md", "error-codes").splitlines()[2:]}
    assert capped == {"TRANSPORT", "PROXY"}
    for code in capped:
        assert rows[code].startswith("yes, [not all](reliability.md#which-failures-before-a-response-are-retried)")
