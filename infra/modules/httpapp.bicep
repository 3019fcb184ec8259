// The HTTP functions' own app on a Dedicated (App Service Premium v3) plan, when main.bicep's httpHostingPlan is
// 'Dedicated': the same code package as the Flex Consumption app (modules/functionapp.bicep), the same identity,
// storage, Key Vault reference and settings, with the background functions turned off here and the HTTP ones
// turned off there, each by the app setting AzureWebJobs.<FUNCTION_NAME>.Disabled = true
// (https://learn.microsoft.com/azure/azure-functions/disable-function, read 2026-11-28). Why: at the design scale
// the device requests are steady all day, and a Dedicated plan bills its instances, not each execution
// (docs/costs.md: Hosting chosen by the load). A Dedicated plan needs no Azure Files content share (an Elastic
// Premium app does, reached with a storage key, which this deployment's storage does not allow), and has Always
// On, which its non-HTTP triggers would need (https://learn.microsoft.com/azure/azure-functions/dedicated-plan).

param name string
param location string
param tags object = {}

@description('azd finds the app to deploy to by this tag (infra/hooks/deploy-http-app.sh deploys to it too).')
param serviceName string = 'http'

param planId string
param storageAccountName string
param applicationInsightsName string
param identityId string
param identityClientId string

@description('Resource ID of the subnet (delegated to Microsoft.Web/serverFarms) for regional virtual network integration; empty: none.')
param virtualNetworkSubnetId string = ''

@description('Settings the code reads (shared/settings.py) and the functions turned off here, merged over the host settings.')
param appSettings object

@description('The telemetry settings every app of the deployment gets alike (main.bicep `telemetrySettings`): OpenTelemetry on in the worker, and the trace sampler the host and the worker both read. Required, so that an app made from this module cannot miss them.')
param telemetrySettings object

// One Python worker process uses one core (its code holds the interpreter lock): an instance of n cores runs n of
// them, at most 10 (https://learn.microsoft.com/azure/azure-functions/python-scale-performance-reference,
// FUNCTIONS_WORKER_PROCESS_COUNT), each with its own thread pool.
@minValue(1)
@maxValue(10)
param workerProcessCount int = 8

@minValue(1)
@maxValue(32)
param pythonThreadpoolThreadCount int = 16

resource storage 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource applicationInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}

// The Flex app's host settings (modules/functionapp.bicep; its telemetry ones come in `telemetrySettings`, alike for
// both apps), and what a Dedicated plan's Linux app needs besides: the runtime by app setting (Flex takes it from
// functionAppConfig), its worker processes, and a remote build of requirements.txt at deployment (zip deploy with
// Oryx, as `func azure functionapp publish` asks for on Linux). No WEBSITE_CONTENTAZUREFILECONNECTIONSTRING: no key.
var hostSettings = {
  AzureWebJobsStorage__accountName: storage.name
  AzureWebJobsStorage__credential: 'managedidentity'
  APPLICATIONINSIGHTS_CONNECTION_STRING: applicationInsights.properties.ConnectionString
  APPLICATIONINSIGHTS_AUTHENTICATION_STRING: 'ClientId=${identityClientId};Authorization=AAD'
  PYTHON_THREADPOOL_THREAD_COUNT: string(pythonThreadpoolThreadCount)
  FUNCTIONS_EXTENSION_VERSION: '~4'
  FUNCTIONS_WORKER_RUNTIME: 'python'
  FUNCTIONS_WORKER_PROCESS_COUNT: string(workerProcessCount)
  SCM_DO_BUILD_DURING_DEPLOYMENT: 'true'
  ENABLE_ORYX_BUILD: 'true'
}

// The same Azure Verified Module as the Flex app's, at the same version (avm/res/web/site/0.24.0).
module httpApp 'br/public:avm/res/web/site:0.24.0' = {
  name: 'httpSite'
  params: {
    name: name
    location: location
    tags: union(tags, { 'azd-service-name': serviceName })
    kind: 'functionapp,linux'
    serverFarmResourceId: planId
    managedIdentities: {
      systemAssigned: false
      userAssignedResourceIds: [
        identityId
      ]
    }
    httpsOnly: true
    keyVaultAccessIdentityResourceId: identityId
    virtualNetworkSubnetResourceId: empty(virtualNetworkSubnetId) ? null : virtualNetworkSubnetId
    publicNetworkAccess: 'Enabled'
    siteConfig: {
      alwaysOn: true
      linuxFxVersion: 'Python|3.13'
      minTlsVersion: '1.2'
      // Integrated into the network, all its outbound traffic goes through it: "Linux applications that connect to
      // private endpoints must be explicitly configured to route all traffic through the virtual network" (Use Key
      // Vault references as app settings, https://learn.microsoft.com/azure/app-service/app-service-key-vault-references),
      // and Cosmos DB, the storage and the vault are private endpoints there.
      vnetRouteAllEnabled: !empty(virtualNetworkSubnetId)
    }
    configs: [
      {
        name: 'appsettings'
        retainCurrentAppSettings: false
        properties: union(hostSettings, telemetrySettings, appSettings)
      }
    ]
  }
}

output name string = httpApp.outputs.name
output defaultHostName string = httpApp.outputs.defaultHostname
