#!/usr/bin/env sh
# azd's postdeploy hook (azure.yaml): with httpHostingPlan Dedicated (infra/design-scale.parameters.json) the HTTP
# functions run in an app of their own (infra/modules/httpapp.bicep, output AZURE_HTTP_APP_NAME); azd deploys the
# package to the Flex app (service `api`), and this deploys the same package to the HTTP app, with a remote build
# of requirements.txt, as `func azure functionapp publish` does on Linux (docs/operations.md, "Hosting the HTTP
# functions on a Dedicated plan"). Without it (FlexConsumption, the default) there is nothing to do.
set -eu
if [ -z "${AZURE_HTTP_APP_NAME:-}" ]; then
  echo "deploy-http-app: every function runs in the Flex Consumption app (httpHostingPlan FlexConsumption): nothing to do"
  exit 0
fi
if ! command -v func >/dev/null 2>&1; then
  echo "deploy-http-app: the HTTP app $AZURE_HTTP_APP_NAME needs Azure Functions Core Tools (func) to deploy to;" >&2
  echo "deploy-http-app: install them, then run: func azure functionapp publish $AZURE_HTTP_APP_NAME --python" >&2
  exit 1
fi
func azure functionapp publish "$AZURE_HTTP_APP_NAME" --python
