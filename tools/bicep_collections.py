"""Print the `var collections = [...]` block of infra/modules/cosmos.bicep from shared/store/schema.py.

    python -m tools.bicep_collections        # paste the output over the block in infra/modules/cosmos.bicep

shared/store/schema.py is the one source of collections, shard keys and indexes; tests/infra/test_infra.py fails when
the Bicep block differs from it, and this prints the block it expects. ARM declares index keys by name only (no
direction) and cannot name an index; Cosmos DB serves a fully reversed sort from the same compound index.
"""

from shared.settings import Settings
from shared.store.schema import DAY_SECONDS, CollectionSpec, IndexSpec, collection_specs

ID_INDEX = "{ key: { keys: ['_id'] } }"


def bicep_parameter(setting: str) -> str:
    """The Bicep parameter that deploys a setting: actions_retention_days -> actionsRetentionDays."""
    first, *rest = setting.split("_")
    return first + "".join(word.capitalize() for word in rest)


def _index_line(index: IndexSpec) -> str:
    keys = ", ".join(f"'{name}'" for name, _direction in index.keys_for(cosmos=True))
    options = []
    if index.unique:
        options.append("unique: true")
    if index.retention_setting is not None:  # a parameter of the module: the deployment sets the days
        options.append(f"expireAfterSeconds: {bicep_parameter(index.retention_setting)} * {DAY_SECONDS}")
    elif index.expire_after_seconds is not None:
        options.append(f"expireAfterSeconds: {index.expire_after_seconds}")
    suffix = f", options: {{ {', '.join(options)} }}" if options else ""
    return f"{{ key: {{ keys: [{keys}] }}{suffix} }}"


def _collection_block(spec: CollectionSpec) -> list[str]:
    lines = ["  {", f"    name: '{spec.name}'", f"    shardKey: '{spec.shard_key or ''}'", "    indexes: ["]
    lines += [f"      {line}" for line in [ID_INDEX, *(_index_line(index) for index in spec.indexes)]]
    return [*lines, "    ]", "  }"]


def render(settings: Settings) -> str:
    """The Bicep `collections` variable for these settings' collections."""
    lines = ["var collections = ["]
    for spec in collection_specs(settings):
        lines += _collection_block(spec)
    return "\n".join([*lines, "]"])


def main() -> None:
    print(render(Settings()))


if __name__ == "__main__":
    main()
