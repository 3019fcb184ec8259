"""`./dev bench --mongodb-uri` (benchmarks/calibrate.py): the model's RU beside the charge the server reports for
each command (getLastRequestStatistics, answered here by a fake that follows Cosmos DB's reply), refusing a
database that holds documents, and leaving nothing behind."""

from typing import Any

import pytest
from pymongo import MongoClient

from benchmarks import calibrate, suite_command
from shared.store import cosmos
from tests.cosmos_fakes import LastCommand, RequestStatistics
from tests.fake_time import QUIET_HOUR

# A benchmark's figures may not depend on when it runs: its clock runs from a fixed quiet hour.
pytestmark = [pytest.mark.integration, pytest.mark.own_clock(QUIET_HOUR)]

CHARGES = {"findAndModify": 11.5, "find": 1.0, "insert": 7.2, "update": 10.4, "delete": 7.1}


def _calibrate(uri: str, database: str, **options: Any) -> list[calibrate.Measured]:
    last = LastCommand()
    return calibrate.calibrate(
        uri,
        database,
        charge_of=lambda db: cosmos.last_request_charge(RequestStatistics(db, last, CHARGES)),
        listeners=[last],
        **options,
    )


def test_each_operation_is_one_command_its_charge_beside_the_models(secantus_uri: str) -> None:
    results = {r.operation: r for r in _calibrate(secantus_uri, "calibration_measured")}

    assert all(r.commands == 1 for r in results.values()), results
    heartbeat = results["heartbeat: the app's update of its heartbeat document"]
    assert heartbeat.charged == CHARGES["update"]
    assert heartbeat.model is not None
    assert 10 < heartbeat.model < 13
    assert results["point read of a bottle"].model == 1.0
    assert results["insert of an action (create)"].charged == 7.2
    inside = results["query inside one shard key value (a bottle's actions)"]
    fanned = results["query that fans out (a user's actions, every partition)"]
    assert fanned.model is not None
    assert inside.model is not None
    assert fanned.model == pytest.approx(inside.model + 2.5)  # one partition here: its index checked once more
    printed = calibrate.table(list(results.values()))
    assert "10.40" in printed
    assert "charged / model" in printed


def test_it_removes_everything_it_wrote(secantus_uri: str) -> None:
    client: MongoClient[dict[str, Any]] = MongoClient(secantus_uri)
    try:
        _calibrate(secantus_uri, "calibration_clean")
        assert client["calibration_clean"].list_collection_names() == []

        client["calibration_shared"]["bottles"].insert_one({"_id": "theirs", "bottle_id": "theirs"})
        _calibrate(secantus_uri, "calibration_shared", allow_non_empty=True)
        db = client["calibration_shared"]
        assert list(db["bottles"].find()) == [{"_id": "theirs", "bottle_id": "theirs"}]
        assert db.list_collection_names() == ["bottles"]
    finally:
        client.drop_database("calibration_shared")
        client.close()


def test_a_database_holding_documents_is_refused_with_one_line_and_exit_2(
    secantus_uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    client: MongoClient[dict[str, Any]] = MongoClient(secantus_uri)
    try:
        client["calibration_full"]["orders"].insert_one({"_id": 1})
        with pytest.raises(SystemExit) as exited:
            suite_command.main(["--mongodb-uri", secantus_uri, "--database", "calibration_full"])

        assert exited.value.code == 2
        error = capsys.readouterr().err.strip()
        assert len(error.splitlines()) == 1
        assert "'calibration_full' holds documents (in orders)" in error
        assert "--allow-non-empty" in error
        assert client["calibration_full"].list_collection_names() == ["orders"]  # nothing written
    finally:
        client.drop_database("calibration_full")
        client.close()


def test_without_a_server_that_reports_charges_the_model_column_stands_alone(
    secantus_uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert calibrate.main(["--mongodb-uri", secantus_uri, "--database", "calibration_plain"]) == 0

    out = capsys.readouterr().out
    assert "not reported" in out
    assert "the model column only" in out
