"""The conformance kit's command line: bad arguments are one clear line and exit status 2."""

from __future__ import annotations

import pytest

from participant_sdk.conformance.__main__ import main


@pytest.mark.parametrize(("args", "message"), [
    (["--action", "charge:weird"], "expected NAME, NAME:tcc or NAME:saga"),
    (["--action", "charge", "--payload", "charge={oops"], "--payload charge: not JSON"),
    (["--action", "charge", "--payload", "charge=[1]"], "expected NAME=<a JSON object>"),
    (["--action", "charge", "--payload", "ship={}"], "not named by --action: ['ship']"),
])
def test_bad_arguments_exit_2_with_one_line(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--bootstrap", "127.0.0.1:1", "--participant", "payments", *args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_an_unreachable_kafka_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--bootstrap", "127.0.0.1:1", "--participant", "p", "--action", "a"])
    err = capsys.readouterr().err
    assert code == 2 and "cannot use Kafka at 127.0.0.1:1" in err and "Traceback" not in err
