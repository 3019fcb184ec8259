#!/usr/bin/env sh
# azd's preprovision hook (azure.yaml): refuse `azd provision` / `azd up` when deploying infra/ would change an
# index of the live account in place (docs/operations.md, "Changing an index's keys"). It asks
# `./dev setup-store --check-deploy`, which exits 1 naming each index the deployment would drop or build; run
# `./dev setup-store` against the account first, then provision again. azd passes its environment's values
# (the outputs of the last provision); a fresh environment (a CI runner's, `azd pipeline config`) has none, so the
# account is looked up in the resource group by its azd-env-name tag. Before the first provision there is no
# account, and nothing to check.
set -eu
if [ -z "${AZURE_RESOURCE_GROUP:-}" ]; then
  echo "check-indexes: no resource group chosen yet (first provision): nothing to check"
  exit 0
fi
if [ -z "${AZURE_COSMOS_ACCOUNT_NAME:-}" ]; then
  AZURE_COSMOS_ACCOUNT_NAME=$(az cosmosdb list --resource-group "$AZURE_RESOURCE_GROUP" \
    --query "[?tags.\"azd-env-name\"=='${AZURE_ENV_NAME:-}'].name | [0]" --output tsv 2>/dev/null || true)
fi
if [ -z "${AZURE_COSMOS_ACCOUNT_NAME:-}" ]; then
  echo "check-indexes: no Cosmos DB account deployed yet in $AZURE_RESOURCE_GROUP (first provision): nothing to check"
  exit 0
fi
# With VNET_ENABLED the account takes no connection from outside its virtual network (public network access is
# disabled): this machine cannot read its indexes. Say so loudly rather than pass for a check that did not run.
if [ "${VNET_ENABLED:-false}" = "true" ]; then
  echo "check-indexes: WARNING: VNET_ENABLED=true, account $AZURE_COSMOS_ACCOUNT_NAME is reachable only from its" >&2
  echo "check-indexes: virtual network; the index check did NOT run. Run ./dev setup-store --check-deploy from" >&2
  echo "check-indexes: inside it before a release that changes an index (docs/operations.md)." >&2
  exit 0
fi
if [ "${COSMOS_KEY_IN_USE:-primary}" = "secondary" ]; then kind=Secondary; else kind=Primary; fi
# The connection string by its name in the account's list (never by position); passed in the environment, not
# on a command line other processes can read.
MONGODB_CONNECTION_STRING=$(az cosmosdb keys list --resource-group "$AZURE_RESOURCE_GROUP" \
  --name "$AZURE_COSMOS_ACCOUNT_NAME" --type connection-strings \
  --query "connectionStrings[?description=='$kind MongoDB Connection String'].connectionString | [0]" --output tsv)
if [ -z "$MONGODB_CONNECTION_STRING" ]; then
  echo "check-indexes: account $AZURE_COSMOS_ACCOUNT_NAME has no '$kind MongoDB Connection String' (az login?)" >&2
  exit 1
fi
export MONGODB_CONNECTION_STRING
export MONGODB_DATABASE="${MONGODB_DATABASE:-pillbottle}"
exec ./dev setup-store --check-deploy
