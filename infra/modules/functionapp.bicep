// The Function App on the Flex Consumption plan: Python 3.13, the user-assigned identity for everything (storage,
// the deployment package, Key Vault references, telemetry), and its app settings: the host's own settings below
// plus every setting of shared/settings.py (appSettings from main.bicep).

param name string
param location string
param tags object = {}

@description('azd finds the app to deploy to by this tag; it matches the service name in azure.yaml.')
param serviceName string = 'api'

param planId string
param storageAccountName string
param deploymentContainerName string
param applicationInsightsName string
param identityId string
param identityClientId string

@description('Resource ID of the subnet for regional virtual network integration (vnetEnabled); empty: none.')
param virtualNetworkSubnetId string = ''

@description('Settings the code reads (shared/settings.py), merged over the host settings.')
param appSettings object

@description('The telemetry settings every app of the deployment gets alike (main.bicep `telemetrySettings`): OpenTelemetry on in the worker, and the trace sampler the host and the worker both read. Required, so that an app made from this module cannot miss them.')
param telemetrySettings object

@minValue(40)
@maxValue(1000)
param maximumInstanceCount int = 100

@allowed([2048, 4096])
param instanceMemoryMB int = 2048

// Always-ready HTTP instances bill a baseline all the time and a lower rate than on demand while busy: they pay
// for a load that keeps them busy all day, as the device events do at the design scale (benchmarks/
// deployment_bill.py chooses, infra/design-scale.parameters.json holds it). 0: every instance on demand.
@minValue(0)
@maxValue(1000)
param httpAlwaysReadyInstances int = 0

// How many HTTP requests one instance takes at once, and the Python worker's threads to run them. Set, not left to
// the defaults, which depend on the instance size and the language
// (https://learn.microsoft.com/azure/azure-functions/functions-concurrency#http-trigger-concurrency): the functions
// are synchronous, so each concurrent invocation needs a worker thread (PYTHON_THREADPOOL_THREAD_COUNT,
// https://learn.microsoft.com/azure/azure-functions/python-scale-performance-reference), and a request spends most
// of its time waiting on Cosmos DB (~2.5 ms of CPU an event measured, benchmarks/RESULTS.md, against a few database
// round trips of ~5 ms): 16 at once keeps one core (2,048 MB) busy without queueing requests behind a short pool.
// Queue-triggered functions scale on their own instances (per-function scaling) and take up to batchSize +
// newBatchThreshold = 6 messages at once (host.json), within the same pool.
@minValue(1)
@maxValue(1000)
param httpPerInstanceConcurrency int = 16

@minValue(1)
@maxValue(32)
param pythonThreadpoolThreadCount int = 16

resource storage 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource applicationInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}

// Settings read by the Functions host, the Python worker or the OpenTelemetry distro, not by shared/settings.py.
// tests/infra/test_infra.py keeps this list to an explained allow-list. Flex Consumption rejects FUNCTIONS_WORKER_RUNTIME
// and FUNCTIONS_EXTENSION_VERSION as app settings: the runtime is functionAppConfig.runtime below.
// AzureWebJobsStorage__clientId and __queueServiceUri, which the code reads as well, come with appSettings.
var hostSettings = {
  AzureWebJobsStorage__accountName: storage.name
  AzureWebJobsStorage__credential: 'managedidentity'
  APPLICATIONINSIGHTS_CONNECTION_STRING: applicationInsights.properties.ConnectionString
  APPLICATIONINSIGHTS_AUTHENTICATION_STRING: 'ClientId=${identityClientId};Authorization=AAD'
  PYTHON_THREADPOOL_THREAD_COUNT: string(pythonThreadpoolThreadCount)
}

// The site itself is the Azure Verified Module the azd Flex Consumption templates use (their infra/app/api.bicep:
// `br/public:avm/res/web/site`), at a version of Azure/bicep-registry-modules (tag avm/res/web/site/0.24.0, whose
// avm/res/web/site/main.bicep declares every parameter passed here; tests/avm_parameters.json lists them).
module functionApp 'br/public:avm/res/web/site:0.24.0' = {
  name: 'site'
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
    // Regional virtual network integration (vnetEnabled): the app's outbound calls (storage, Cosmos DB, Key Vault)
    // go through the subnet to the private endpoints. Devices still reach the app's public endpoint.
    virtualNetworkSubnetResourceId: empty(virtualNetworkSubnetId) ? null : virtualNetworkSubnetId
    publicNetworkAccess: 'Enabled'
    // The module's default siteConfig turns alwaysOn on, which Flex Consumption does not have.
    siteConfig: {
      alwaysOn: false
      minTlsVersion: '1.2'
    }
    functionAppConfig: {
      deployment: {
        storage: {
          type: 'blobContainer'
          value: '${storage.properties.primaryEndpoints.blob}${deploymentContainerName}'
          authentication: {
            type: 'UserAssignedIdentity'
            userAssignedIdentityResourceId: identityId
          }
        }
      }
      scaleAndConcurrency: {
        alwaysReady: (httpAlwaysReadyInstances > 0) ? [
          {
            name: 'http'
            instanceCount: httpAlwaysReadyInstances
          }
        ] : []
        maximumInstanceCount: maximumInstanceCount
        instanceMemoryMB: instanceMemoryMB
        triggers: {
          http: {
            perInstanceConcurrency: httpPerInstanceConcurrency
          }
        }
      }
      runtime: {
        name: 'python'
        version: '3.13'
      }
    }
    // The app settings are exactly these: retainCurrentAppSettings false, so a setting removed here is removed from
    // the app (the module's default merges in whatever the app had). No storageAccountResourceId or
    // applicationInsightResourceId either: the module would add key-based or agent settings the app does not use.
    configs: [
      {
        name: 'appsettings'
        retainCurrentAppSettings: false
        properties: union(hostSettings, telemetrySettings, appSettings)
      }
    ]
  }
}

output name string = functionApp.outputs.name
output defaultHostName string = functionApp.outputs.defaultHostname
