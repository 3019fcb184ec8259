"""Deploying infra/ replaces each collection's whole index list in place (the Bicep's `indexes`, which
tests/infra/test_infra.py holds equal to shared/store/schema.py). The safe order is a checked step: `./dev setup-store
--check-deploy` names every index a deployment would drop or build on the live account, and every build still
running, and exits 1; azd runs it before every provision (azure.yaml's preprovision hook,
infra/hooks/check-indexes.sh).

Why: on Cosmos DB a dropped index stops serving at once and a new one serves only once its transformation ends,
so sorts that need either fail (code 2) meanwhile
(https://learn.microsoft.com/azure/cosmos-db/mongodb/indexing#background-index-updates)."""

import json
import os
import subprocess
from pathlib import Path

import mongomock
import pytest
import yaml

from shared.settings import get_settings
from shared.store import schema
from shared.store.setup import BuildWait, IndexBuildPending, deploy_problems, ensure_store
from shared.store.setup_command import main
from tests import bicep
from tests.cosmos_fakes import FakeCosmosDatabase, IndexTransformingDatabase
from tests.store.old_layout import OLD_KEYS, pending_notifications

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / "infra" / "hooks" / "check-indexes.sh"
NEW_KEYS = ["delivery", "kind", "created_at", "bucket"]


def deployed_before_the_change() -> IndexTransformingDatabase:
    """A Cosmos DB account set up as declared, except that the delivery sweep's index still has the keys it had
    before `bucket`, with notifications in it: what a release that changes those keys meets."""
    fake = IndexTransformingDatabase(mongomock.MongoClient().db, polls=3)
    ensure_store(fake, get_settings(), on_cosmos=True)
    notifications = fake.db[schema.NOTIFICATIONS]
    notifications.drop_index("delivery_pending")
    notifications.create_index(OLD_KEYS, name="delivery_pending")
    pending_notifications(fake.db, 5)
    return fake


def test_an_account_set_up_as_declared_is_safe_to_deploy_and_an_empty_one_too():
    fake = FakeCosmosDatabase(mongomock.MongoClient().db)
    assert deploy_problems(fake, get_settings(), on_cosmos=True) == []  # nothing yet: the deployment creates all

    ensure_store(fake, get_settings(), on_cosmos=True)

    assert deploy_problems(fake, get_settings(), on_cosmos=True) == []


def test_a_deployment_that_would_swap_an_index_s_keys_is_refused_until_the_setup_has_run():
    fake = deployed_before_the_change()

    problems = deploy_problems(fake, get_settings(), on_cosmos=True)

    old = [key for key, _direction in OLD_KEYS]
    assert problems == [
        f"notifications: the deployment would drop the index delivery_pending {old}, which the running code may use "
        "(infra/ no longer declares it)",
        f"notifications: the deployment would build the index delivery_pending {NEW_KEYS} in place; code that needs "
        "it fails until it is built",
    ]
    ensure_store(fake, get_settings(), on_cosmos=True, wait=BuildWait(sleep=lambda s: None))
    assert deploy_problems(fake, get_settings(), on_cosmos=True) == []


def test_a_build_still_running_is_refused():
    fake = deployed_before_the_change()
    fake.polls = 10
    ticks = iter(range(0, 10_000, 60))
    gives_up = BuildWait(timeout_s=60, clock=lambda: float(next(ticks)), sleep=lambda s: None)
    with pytest.raises(IndexBuildPending):  # the setup gave up waiting: both indexes are there
        ensure_store(fake, get_settings(), on_cosmos=True, wait=gives_up)

    problems = deploy_problems(fake, get_settings(), on_cosmos=True)

    assert problems[0].startswith("notifications: the deployment would drop the index delivery_pending ")
    assert problems[1].startswith("notifications: Cosmos DB is still building an index (")


def test_an_index_the_code_no_longer_declares_is_one_the_deployment_would_drop():
    fake = IndexTransformingDatabase(mongomock.MongoClient().db)
    ensure_store(fake, get_settings(), on_cosmos=True)
    fake.db[schema.BOTTLE_ACTIONS].create_index([("medication", 1)], name="by_medication")

    assert deploy_problems(fake, get_settings(), on_cosmos=True) == [
        "bottle_actions: the deployment would drop the index by_medication ['medication'], which the running code "
        "may use (infra/ no longer declares it)"
    ]


def test_ttl_indexes_are_the_deployment_s_own_and_left_out():
    """Their days are parameters of the deployment (the retention settings), and no query uses them."""
    fake = FakeCosmosDatabase(mongomock.MongoClient().db)
    ensure_store(fake, get_settings(), on_cosmos=True)
    actions = fake.db[schema.BOTTLE_ACTIONS]
    [ttl] = [name for name, info in actions.index_information().items() if "expireAfterSeconds" in info]
    actions.drop_index(ttl)
    actions.create_index([("_ts", 1)], name="ts_ttl", expireAfterSeconds=86_400)

    assert deploy_problems(fake, get_settings(), on_cosmos=True) == []


@pytest.mark.integration
def test_the_command_line_says_safe_or_refuses_with_exit_1_on_a_real_server(secantus_uri, secantus_client, capsys):
    database = "deploy_check_cli"
    main(["--uri", secantus_uri, "--database", database])
    capsys.readouterr()

    main(["--uri", secantus_uri, "--database", database, "--check-deploy"])
    assert "safe to deploy infra/" in capsys.readouterr().out

    secantus_client[database][schema.BOTTLES].create_index([("medication", 1)], name="by_medication")
    with pytest.raises(SystemExit) as refused:
        main(["--uri", secantus_uri, "--database", database, "--check-deploy"])
    said = capsys.readouterr()
    assert refused.value.code == 1
    assert "bottles: the deployment would drop the index by_medication ['medication']" in said.out
    assert "refusing: deploying infra/ now would change the indexes above in place" in said.err
    assert "Run `./dev setup-store` against this account first" in said.err
    secantus_client.drop_database(database)


# --- the azd hook ---------------------------------------------------------------------------------------------


def test_azd_runs_the_check_before_every_provision():
    hooks = yaml.safe_load((ROOT / "azure.yaml").read_text())["hooks"]
    assert hooks["preprovision"] == {"shell": "sh", "run": "./infra/hooks/check-indexes.sh", "continueOnError": False}
    assert os.access(HOOK, os.X_OK)


# `az` as Azure answers the connection string list, each string by its name.
CONNECTION_STRINGS_AZ = (
    "  *\"description=='Primary MongoDB Connection String'\"*) echo 'mongodb://primary' ;;\n"
    "  *\"description=='Secondary MongoDB Connection String'\"*) echo 'mongodb://secondary' ;;\n"
)
# `az` on a fresh pipeline runner: the account tagged azd-env-name=prod in rg (no other), and its strings by name.
PIPELINE_AZ = (
    '  *"cosmosdb list --resource-group rg"*"azd-env-name\\"==\'prod\'"*) echo cosmon-found ;;\n'
    '  *"keys list --resource-group rg --name cosmon-found"*"\'Primary MongoDB Connection String\'"*)'
    " echo mongodb://primary ;;\n"
)


def run_hook(
    tmp_path: Path, env: dict[str, str], *, check_exits: int = 0, az: str = CONNECTION_STRINGS_AZ
) -> subprocess.CompletedProcess[str]:
    """The hook, run from a project folder whose `./dev` records how it was called (and exits `check_exits`),
    with an `az` that answers as `az` says (its `case` arms)."""
    project, tools = tmp_path / "project", tmp_path / "bin"
    project.mkdir()
    tools.mkdir()
    (project / "dev").write_text(
        "#!/bin/sh\n"
        f'echo "$* uri=$MONGODB_CONNECTION_STRING db=$MONGODB_DATABASE" > {tmp_path}/dev.called\n'
        f"exit {check_exits}\n"
    )
    (tools / "az").write_text(f'#!/bin/sh\ncase "$*" in\n{az}esac\n')
    for script in (project / "dev", tools / "az"):
        script.chmod(0o755)
    return subprocess.run(
        ["sh", str(HOOK)],
        cwd=project,
        env={"PATH": f"{tools}:{os.environ['PATH']}", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_hook_checks_the_deployed_account_with_the_key_in_use(tmp_path: Path):
    deployed = {"AZURE_COSMOS_ACCOUNT_NAME": "cosmos-x", "AZURE_RESOURCE_GROUP": "rg", "MONGODB_DATABASE": "pb"}

    run = run_hook(tmp_path, deployed)

    assert run.returncode == 0, run.stderr
    called = (tmp_path / "dev.called").read_text()
    assert called == "setup-store --check-deploy uri=mongodb://primary db=pb\n"
    assert "mongodb://" not in run.stdout + run.stderr  # the connection string is never printed


def test_the_hook_refuses_the_provision_when_the_check_does(tmp_path: Path):
    deployed = {"AZURE_COSMOS_ACCOUNT_NAME": "cosmos-x", "AZURE_RESOURCE_GROUP": "rg", "COSMOS_KEY_IN_USE": "secondary"}

    run = run_hook(tmp_path, deployed, check_exits=1)

    assert run.returncode == 1
    assert (tmp_path / "dev.called").read_text() == "setup-store --check-deploy uri=mongodb://secondary db=pillbottle\n"


def test_the_hook_has_nothing_to_check_before_the_first_provision(tmp_path: Path):
    run = run_hook(tmp_path, {})

    assert run.returncode == 0
    assert "nothing to check" in run.stdout
    assert not (tmp_path / "dev.called").exists()


def test_the_index_check_runs_in_the_pipeline_too_finding_the_account_by_its_environment_tag(tmp_path: Path) -> None:
    """A pipeline runner's azd environment is new: it has no outputs of a last provision, so the hook used to find
    no account and skip the check on every pipeline provision. It now finds the environment's account in the
    resource group by its azd-env-name tag (every resource carries it: main.bicep `tags`)."""
    run = run_hook(tmp_path, {"AZURE_RESOURCE_GROUP": "rg", "AZURE_ENV_NAME": "prod"}, az=PIPELINE_AZ)

    assert run.returncode == 0, run.stderr
    assert (tmp_path / "dev.called").read_text() == "setup-store --check-deploy uri=mongodb://primary db=pillbottle\n"
    assert "azd-env-name" in json.dumps(bicep.variable("main.bicep", "tags"))  # every resource carries the tag


def test_the_index_check_says_it_did_not_run_when_the_account_is_inside_a_virtual_network(tmp_path: Path) -> None:
    """With VNET_ENABLED the account refuses connections from outside its network: the hook cannot check, and says
    so on stderr rather than fail every provision or pass silently."""
    env = {"AZURE_RESOURCE_GROUP": "rg", "AZURE_ENV_NAME": "prod", "VNET_ENABLED": "true"}

    run = run_hook(tmp_path, env, az=PIPELINE_AZ)

    assert run.returncode == 0
    assert not (tmp_path / "dev.called").exists()
    assert "the index check did NOT run" in run.stderr
    assert "cosmon-found" in run.stderr
