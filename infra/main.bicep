// Everything the pill-bottle Functions app needs in one resource group, in the shape of the azd Python Functions
// Flex Consumption templates (Azure Verified Modules where they fit). Deploy with `azd up`, or with
// `az deployment group create` (docs/operations.md). Resource-group scoped, so both tools can target an existing group.
targetScope = 'resourceGroup'

@minLength(1)
@maxLength(64)
@description('Environment name (azd: AZURE_ENV_NAME); with the resource group it makes resource names unique.')
param environmentName string

@minLength(1)
@description('Region of every resource; it must offer Flex Consumption (az functionapp list-flexconsumption-locations).')
@metadata({
  azd: {
    type: 'location'
  }
})
param location string = resourceGroup().location

@description('Put storage, Cosmos DB and Key Vault behind private endpoints in a virtual network the Function App integrates with, their public network access disabled (azd: VNET_ENABLED, as in the azd Flex Consumption templates). Off: every service keeps its public endpoint (docs/operations.md: Virtual network).')
param vnetEnabled bool = false

@description('Database the app uses (MONGODB_DATABASE).')
param databaseName string = 'pillbottle'

@description('Autoscale maximum RU/s of each collection with a shard key (Cosmos bills at least 10 % of it every hour).')
@minValue(1000)
param cosmosMaxThroughput int = 1000

@description('Per-collection autoscale maximum RU/s overriding cosmosMaxThroughput, e.g. { bottle_heartbeats: 200000 } (collections with a shard key; docs/costs.md).')
param cosmosMaxThroughputByCollection object = {}

@description('Standard (manual) RU/s of the collection without a shard key, `leases`: 400 to 10,000 (modules/cosmos.bicep says why not autoscale).')
@minValue(400)
@maxValue(10000)
param cosmosUnshardedThroughput int = 400

@description('Per-collection standard (manual) RU/s instead of autoscale, e.g. { bottle_heartbeats: 195000 }: the design scale\'s choice is in design-scale.parameters.json (docs/costs.md: Throughput to deploy).')
param cosmosStandardThroughputByCollection object = {}

@description('Days an opened/closed event is kept after its last write: ACTIONS_RETENTION_DAYS and the TTL (docs/architecture.md: Retention).')
@minValue(32)
param actionsRetentionDays int = 60

@description('Days an hourly report is kept after its last write: HOURLY_REPORTS_RETENTION_DAYS and the TTL.')
@minValue(32)
param hourlyReportsRetentionDays int = 60

@description('Days a notification is kept after its last write: NOTIFICATIONS_RETENTION_DAYS and the TTL.')
@minValue(1)
param notificationsRetentionDays int = 90

@description('Days a daily report is kept after its last write: DAILY_REPORTS_RETENTION_DAYS and the TTL.')
@minValue(32)
param dailyReportsRetentionDays int = 400

@description('Blob container of the archive (ARCHIVE_CONTAINER): every opened/closed event for good, every bottle-hour\'s heartbeats for heartbeatArchiveDays (docs/archive.md).')
@minLength(3)
@maxLength(63)
param archiveContainerName string = 'archive'

@description('Days the archive keeps heartbeat files after their last write (HEARTBEAT_ARCHIVE_DAYS): the lifecycle management policy deletes them.')
@minValue(1)
param heartbeatArchiveDays int = 14

@description('Days after their last write that the archive\'s event files move to the cool tier (they are kept for good).')
@minValue(1)
param archiveActionsCoolAfterDays int = 30

@description('Days after their last write that the archive\'s event files move to the cold tier.')
@minValue(2)
param archiveActionsColdAfterDays int = 90

@description('Days after their last write that the archive\'s event files move to the archive tier, which is offline (a reader must rehydrate them first, for hours); 0: never.')
@minValue(0)
param archiveActionsArchiveTierAfterDays int = 0

@description('Cosmos DB account key whose connection string the app uses; flip it to rotate keys (docs/operations.md: Rotating keys).')
@allowed(['primary', 'secondary'])
param cosmosKeyInUse string = 'primary'

@description('Name of the Storage queue the notification checks write to (the NOTIFICATIONS_QUEUE setting).')
param notificationsQueueName string = 'notifications'

@description('Name of the Storage queue of the report workers\' work messages (the REPORTS_QUEUE setting).')
param reportsQueueName string = 'report-partitions'

@description('Name of the Storage queue of the check partition workers\' work messages (the CHECKS_QUEUE setting).')
param checksQueueName string = 'check-partitions'

@description('Most instances Flex Consumption may scale the app out to. Every Flex app of the subscription in the region shares a quota of 250 cores (250 instances of 2,048 MB) unless raised by a support request (docs/costs.md: Functions instances and the regional quota).')
@minValue(40)
@maxValue(1000)
param maximumInstanceCount int = 100

@description('Memory of each instance in MB (docs/costs.md: the Functions bill chooses it).')
@allowed([2048, 4096])
param instanceMemoryMB int = 2048

@description('Always-ready instances of the HTTP functions (0: all on demand); the design scale\'s is in design-scale.parameters.json (docs/costs.md).')
@minValue(0)
@maxValue(1000)
param httpAlwaysReadyInstances int = 0

@description('Where the HTTP functions run (docs/costs.md: Hosting chosen by the load): FlexConsumption, every function in one Flex Consumption app (small fleets, bursty loads: it scales to zero); Dedicated, the HTTP functions in an app of their own on a Dedicated plan of httpInstanceCount httpPlanSku instances (a steady load all day: no execution charge), the timers and queue workers in the Flex app. The design scale\'s is in design-scale.parameters.json.')
@allowed(['FlexConsumption', 'Dedicated'])
param httpHostingPlan string = 'FlexConsumption'

@description('Instance size of the HTTP functions\' Dedicated plan (httpHostingPlan Dedicated): Premium v3, 2, 4 or 8 cores.')
@allowed(['P1v3', 'P2v3', 'P3v3'])
param httpPlanSku string = 'P3v3'

@description('Instances of the HTTP functions\' Dedicated plan (httpHostingPlan Dedicated): a Premium v3 plan has at most 30. Set, not scaled by events: raise it before a fleet grows (docs/operations.md).')
@minValue(1)
@maxValue(30)
param httpInstanceCount int = 2

@description('Python worker processes on each instance of the HTTP functions\' Dedicated plan: one a core (P1v3 2, P2v3 4, P3v3 8), at most 10.')
@minValue(1)
@maxValue(10)
param httpWorkerProcessCount int = 8

@description('Days Log Analytics keeps logs and telemetry.')
param logRetentionDays int = 30

@description('Daily ingestion cap of the Log Analytics workspace and of Application Insights, in GB (-1: none): twice what the load it is sized for sends in a day at traceSamplingRatio, rounded up to a multiple of 10 (the default: a small fleet keeping every trace; the design scale\'s is in design-scale.parameters.json; docs/operations.md: Telemetry). Once hit, telemetry stops for the rest of the workspace\'s day: alerts fire before it (dailyCapWarningPercent) and when it is reached.')
@minValue(-1)
param logDailyQuotaGb int = 10

@description('Alert when an hour\'s billable ingestion, kept up for a day, would reach this percentage of the daily cap.')
@minValue(1)
@maxValue(100)
param dailyCapWarningPercent int = 80

@description('The share of traces kept, the same in the Functions host and the Python worker (OTEL_TRACES_SAMPLER microsoft.fixed_percentage, OTEL_TRACES_SAMPLER_ARG): a fixed percentage, so the volume follows the traffic, not the instances. The smallest that keeps 10 device requests\' traces a second: every trace (1) for a small fleet, up to ~10 requests a second (~17 K bottles); the design scale\'s (0.001) is in design-scale.parameters.json (docs/operations.md: Telemetry). Warnings, errors and metrics are kept whatever it is.')
@allowed(['0.001', '0.002', '0.005', '0.01', '0.02', '0.05', '0.1', '0.2', '0.5', '1'])
param traceSamplingRatio string = '1'

@description('App settings to set or override on top of the ones below, e.g. { STORE_MAX_RETRIES: \'5\' }.')
param appSettingOverrides object = {}

@description('Email address the alerts notify too (azd: ALERT_EMAIL); empty: none (docs/operations.md: Metrics and alerts).')
param alertEmail string = ''

@description('Email the subscription\'s Owners (an Azure Resource Manager role receiver of the action group) when an alert fires, so that alerts notify someone with no email given.')
param alertSubscriptionOwners bool = true

@description('Resource ID of an existing action group the alerts notify too; empty: none.')
param alertActionGroupId string = ''

@description('Alert when every report consumer run of 15 minutes left a feed more than this many minutes behind.')
param alertReportLagMinutes int = 10

@description('Alert when, after every check run of 15 minutes, more notifications of a kind than this (all partitions together) wait for the queue.')
param alertPendingNotifications int = 1000

@description('Alert when every run of a check partition hit its time budget in this many 5-minute periods in a row.')
@minValue(1)
@maxValue(6)
param alertCheckBudgetPeriodsInARow int = 3

@description('Alert when a function answers more 503s than this in 5 minutes.')
param alertUnavailableResponsesPer5Minutes int = 50

@description('Alert when more database calls than this are throttled in each of 3 periods of 5 minutes in a row.')
param alertThrottlesPer5Minutes int = 300

@description('Alert when a function answers more 500s than this in 5 minutes (a fault: a bug, a database error that is not transient).')
param alertInternalErrorsPer5Minutes int = 0

@description('Alert when more than this percentage of HTTP requests in 5 minutes answer 5xx.')
param alertHttp5xxPercent int = 5

var abbrs = loadJsonContent('./abbreviations.json')
var resourceToken = toLower(uniqueString(subscription().id, resourceGroup().id, environmentName, location))
var tags = { 'azd-env-name': environmentName }
var functionAppName = '${abbrs.webSitesFunctions}api-${resourceToken}'
var httpAppName = '${abbrs.webSitesFunctions}http-${resourceToken}'
var splitHttp = httpHostingPlan == 'Dedicated'

// One code package, two apps when httpHostingPlan is Dedicated: each turns off the functions the other runs, by the
// app setting AzureWebJobs.<FUNCTION_NAME>.Disabled (https://learn.microsoft.com/azure/azure-functions/
// disable-function, read 2026-11-28). tests/infra/test_hosting.py keeps these lists to the app's own functions, by
// their triggers.
var httpFunctionsOff = {
  'AzureWebJobs.provision_bottle.Disabled': 'true'
  'AzureWebJobs.get_bottle.Disabled': 'true'
  'AzureWebJobs.post_events.Disabled': 'true'
  'AzureWebJobs.get_user_notifications.Disabled': 'true'
  'AzureWebJobs.get_user_reports.Disabled': 'true'
}
var backgroundFunctionsOff = {
  'AzureWebJobs.check_open_bottles.Disabled': 'true'
  'AzureWebJobs.check_silent_bottles.Disabled': 'true'
  'AzureWebJobs.check_late_doses.Disabled': 'true'
  'AzureWebJobs.run_check_partition.Disabled': 'true'
  'AzureWebJobs.aggregate_reports.Disabled': 'true'
  'AzureWebJobs.aggregate_report_partition.Disabled': 'true'
}
var deploymentContainerName = 'app-package-${take(functionAppName, 32)}-${take(resourceToken, 7)}'

// Every setting shared/settings.py reads (env name = upper-cased field name), at the code's defaults unless it is
// deployment-specific. tests/infra/test_infra.py checks this against the Settings class both ways.
var appSettings = {
  MONGODB_CONNECTION_STRING: '@Microsoft.KeyVault(SecretUri=${keyVault.outputs.mongoSecretUri})'
  MONGODB_DATABASE: databaseName
  MAX_EVENT_AGE_DAYS: '30'
  HEARTBEAT_WINDOW_HOURS: '24'
  // The collections' TTL (modules/cosmos.bicep) is deployed from the same parameters.
  ACTIONS_RETENTION_DAYS: string(actionsRetentionDays)
  HOURLY_REPORTS_RETENTION_DAYS: string(hourlyReportsRetentionDays)
  NOTIFICATIONS_RETENTION_DAYS: string(notificationsRetentionDays)
  DAILY_REPORTS_RETENTION_DAYS: string(dailyReportsRetentionDays)
  STORE_MAX_RETRIES: '3'
  STORE_RETRY_BASE_MS: '100'
  STORE_SERVER_SELECTION_TIMEOUT_MS: '3000'
  STORE_CONNECT_TIMEOUT_MS: '3000'
  STORE_SOCKET_TIMEOUT_MS: '8000'
  REQUEST_DEADLINE_SECONDS: '8'
  OUTAGE_RETRY_AFTER_SECONDS: '30'
  REPORTS_SCHEDULE: '0 */1 * * * *'
  REPORTS_PARTITIONS: '4'
  REPORTS_QUEUE: reportsQueueName
  REPORTS_LEASE_SECONDS: '120'
  CHANGE_SOURCE: 'change_stream'
  REPORTS_TIME_BUDGET_SECONDS: '45'
  REPORTS_PAGE_SIZE: '500'
  REPORTS_TALLY_SPREAD_MINUTES: '60'
  REPORTS_POLL_OVERLAP_SECONDS: '300'
  DAILY_ROLLUP_HOURS: '6'
  DAILY_ROLLUP_STAGGERED: 'true'
  CHECK_OPEN_BOTTLES_SCHEDULE: '0 */1 * * * *'
  CHECK_SILENT_BOTTLES_SCHEDULE: '0 */5 * * * *'
  CHECK_LATE_DOSES_SCHEDULE: '0 */5 * * * *'
  CHECK_LATE_DOSES_SPREAD_MINUTES: '4'
  CHECK_PARTITIONS: '4'
  CHECKS_QUEUE: checksQueueName
  LEFT_OPEN_MINUTES: '5'
  SILENT_MINUTES: '60'
  DOSE_HISTORY: '32'
  NOTIFICATIONS_QUEUE: notificationsQueueName
  // The checks send to that queue with the Storage Queue SDK, on the host's storage account and the host's
  // identity-based settings: its queue endpoint and the app's user-assigned identity (the host reads both too).
  // AzureWebJobsStorage itself, a connection string, is for local runs only: no storage key is ever deployed.
  AzureWebJobsStorage__queueServiceUri: 'https://${storage.outputs.name}.queue.${environment().suffixes.storage}'
  AzureWebJobsStorage__clientId: identity.outputs.clientId
  QUEUE_SEND_TIMEOUT_SECONDS: '5'
  QUEUE_SEND_RETRIES: '2'
  QUEUE_SEND_CONCURRENCY: '8'
  CHECK_BATCH_SIZE: '500'
  QUEUE_MESSAGES_PER_PARTITION: '5000'
  CHECKS_TIME_BUDGET_SECONDS: '50'
  // The archive (docs/archive.md): a container of the same storage account, reached with the same identity.
  AzureWebJobsStorage__blobServiceUri: 'https://${storage.outputs.name}.blob.${environment().suffixes.storage}'
  ARCHIVE_CONTAINER: archiveContainerName
  HEARTBEAT_ARCHIVE_DAYS: string(heartbeatArchiveDays)
  ARCHIVE_PAGE_SIZE: '5000'
  ARCHIVE_DIR: ''
}

// The telemetry settings every Function App of the deployment must get (modules/functionapp.bicep's required
// `telemetrySettings`): the host and the Python worker read the same sampler from them
// (docs/operations.md: Telemetry). The host samples its traces by OTEL_TRACES_SAMPLER since azure-functions-host
// PR 11568 (https://github.com/Azure/azure-functions-host/pull/11568, merged 2026-01-20, read 2026-11-28); the
// distro reads the same two settings (azure-monitor-opentelemetry _utils/configurations.py), and both keep a trace
// by a hash of its id, so the host and the worker keep the same traces.
var telemetrySettings = {
  PYTHON_ENABLE_OPENTELEMETRY: 'true'
  OTEL_TRACES_SAMPLER: 'microsoft.fixed_percentage'
  OTEL_TRACES_SAMPLER_ARG: traceSamplingRatio
}

// Azure Verified Modules are pinned to versions of Azure/bicep-registry-modules; each comment names the tag
// (avm/res/<module>/<version>) whose main.bicep declares every parameter passed, as tests/avm_parameters.json lists.

// The identity the app uses for storage, the deployment package, Key Vault and telemetry.
// Tag avm/res/managed-identity/user-assigned-identity/0.4.1 (the azd templates' version).
module identity 'br/public:avm/res/managed-identity/user-assigned-identity:0.4.1' = {
  name: 'identity'
  params: {
    name: '${abbrs.managedIdentityUserAssignedIdentities}api-${resourceToken}'
    location: location
    tags: tags
  }
}

// Tag avm/res/operational-insights/workspace/0.11.1.
module logAnalytics 'br/public:avm/res/operational-insights/workspace:0.11.1' = {
  name: 'logAnalytics'
  params: {
    name: '${abbrs.operationalInsightsWorkspaces}${resourceToken}'
    location: location
    tags: tags
    dataRetention: logRetentionDays
    dailyQuotaGb: logDailyQuotaGb
  }
}

// Tag avm/res/insights/component/0.6.0.
module applicationInsights 'br/public:avm/res/insights/component:0.6.0' = {
  name: 'applicationInsights'
  params: {
    name: '${abbrs.insightsComponents}${resourceToken}'
    location: location
    tags: tags
    workspaceResourceId: logAnalytics.outputs.resourceId
    disableLocalAuth: true
  }
}

// Application Insights' own daily cap, the same as the workspace's: for a workspace-based component "the effective
// daily cap is the minimum of the two settings" (https://learn.microsoft.com/azure/azure-monitor/logs/daily-cap, read
// 2026-11-28), so neither is left at a default no one chose. The resource type: microsoft.insights
// components/pricingPlans (https://learn.microsoft.com/azure/templates/microsoft.insights/components/pricingplans).
module ingestionCap 'modules/ingestion-cap.bicep' = if (logDailyQuotaGb > 0) {
  name: 'ingestionCap'
  params: {
    applicationInsightsName: applicationInsights.outputs.name
    dailyCapGb: logDailyQuotaGb
    warningPercent: dailyCapWarningPercent
  }
}

// The host's storage (identity-based AzureWebJobsStorage: no keys), the deployment package container, the
// notifications queue (which the checks send to with the SDK; it is created here, not by the app) and the work
// queues of the report and check partition workers. Tag avm/res/storage/storage-account/0.8.3 (the templates').
module storage 'br/public:avm/res/storage/storage-account:0.8.3' = {
  name: 'storage'
  params: {
    name: '${abbrs.storageStorageAccounts}${resourceToken}'
    location: location
    tags: tags
    skuName: 'Standard_LRS'
    allowBlobPublicAccess: false
    allowSharedKeyAccess: false
    dnsEndpointType: 'Standard'
    // vnetEnabled: reached through its blob and queue private endpoints only, as in the azd templates.
    publicNetworkAccess: vnetEnabled ? 'Disabled' : 'Enabled'
    networkAcls: vnetEnabled ? {
      defaultAction: 'Deny'
      bypass: 'None'
    } : {
      defaultAction: 'Allow'
      bypass: 'AzureServices'
    }
    minimumTlsVersion: 'TLS1_2'
    blobServices: {
      containers: [
        { name: deploymentContainerName }
      ]
    }
    queueServices: {
      queues: [
        { name: notificationsQueueName }
        { name: reportsQueueName }
        { name: checksQueueName }
      ]
    }
  }
}

// Tag avm/res/web/serverfarm/0.1.1 (the azd templates' version).
module plan 'br/public:avm/res/web/serverfarm:0.1.1' = {
  name: 'plan'
  params: {
    name: '${abbrs.webServerFarms}${resourceToken}'
    location: location
    tags: tags
    sku: {
      name: 'FC1'
      tier: 'FlexConsumption'
    }
    reserved: true
  }
}

// The HTTP functions' Dedicated plan (httpHostingPlan Dedicated), with the same verified module at the same version
// as the Flex plan's (avm/res/web/serverfarm/0.1.1): Linux, Premium v3, its instances set (no event-driven scale).
module httpPlan 'br/public:avm/res/web/serverfarm:0.1.1' = if (splitHttp) {
  name: 'httpPlan'
  params: {
    name: '${abbrs.webServerFarms}http-${resourceToken}'
    location: location
    tags: tags
    kind: 'linux'
    sku: {
      name: httpPlanSku
      tier: 'PremiumV3'
      capacity: httpInstanceCount
    }
    reserved: true
  }
}

module cosmos 'modules/cosmos.bicep' = {
  name: 'cosmos'
  params: {
    name: '${abbrs.documentDBMongoDatabaseAccounts}${resourceToken}'
    location: location
    tags: tags
    databaseName: databaseName
    defaultMaxThroughput: cosmosMaxThroughput
    maxThroughputByCollection: cosmosMaxThroughputByCollection
    unshardedThroughput: cosmosUnshardedThroughput
    standardThroughputByCollection: cosmosStandardThroughputByCollection
    actionsRetentionDays: actionsRetentionDays
    hourlyReportsRetentionDays: hourlyReportsRetentionDays
    notificationsRetentionDays: notificationsRetentionDays
    dailyReportsRetentionDays: dailyReportsRetentionDays
    publicNetworkAccess: vnetEnabled ? 'Disabled' : 'Enabled'
  }
}

module keyVault 'modules/keyvault.bicep' = {
  name: 'keyVault'
  params: {
    name: '${abbrs.keyVaultVaults}${resourceToken}'
    location: location
    tags: tags
    cosmosAccountName: cosmos.outputs.name
    cosmosKeyInUse: cosmosKeyInUse
    readerPrincipalId: identity.outputs.principalId
    publicNetworkAccess: vnetEnabled ? 'Disabled' : 'Enabled'
  }
}

// vnetEnabled: the network, and a private endpoint (with its private DNS zone) for each service the app calls
// (docs/operations.md: Virtual network). The host's storage needs blob (its locks, the deployment package, the
// archive) and queue (the work and notification queues); Application Insights stays public, as in the templates.
module vnet 'modules/vnet.bicep' = if (vnetEnabled) {
  name: 'vnet'
  params: {
    name: '${abbrs.networkVirtualNetworks}${resourceToken}'
    location: location
    tags: tags
  }
}

module blobEndpoint 'modules/private-endpoint.bicep' = if (vnetEnabled) {
  name: 'blobEndpoint'
  params: {
    name: '${abbrs.networkPrivateEndpoints}blob-${resourceToken}'
    location: location
    tags: tags
    serviceResourceId: storage.outputs.resourceId
    groupId: 'blob'
    privateDnsZoneName: 'privatelink.blob.${environment().suffixes.storage}'
    virtualNetworkId: vnetEnabled ? vnet.outputs.resourceId : ''
    subnetId: vnetEnabled ? vnet.outputs.privateEndpointSubnetId : ''
  }
}

module queueEndpoint 'modules/private-endpoint.bicep' = if (vnetEnabled) {
  name: 'queueEndpoint'
  params: {
    name: '${abbrs.networkPrivateEndpoints}queue-${resourceToken}'
    location: location
    tags: tags
    serviceResourceId: storage.outputs.resourceId
    groupId: 'queue'
    privateDnsZoneName: 'privatelink.queue.${environment().suffixes.storage}'
    virtualNetworkId: vnetEnabled ? vnet.outputs.resourceId : ''
    subnetId: vnetEnabled ? vnet.outputs.privateEndpointSubnetId : ''
  }
}

module cosmosEndpoint 'modules/private-endpoint.bicep' = if (vnetEnabled) {
  name: 'cosmosEndpoint'
  params: {
    name: '${abbrs.networkPrivateEndpoints}cosmos-${resourceToken}'
    location: location
    tags: tags
    serviceResourceId: cosmos.outputs.resourceId
    groupId: 'MongoDB'
    privateDnsZoneName: 'privatelink.mongo.cosmos.azure.com'
    virtualNetworkId: vnetEnabled ? vnet.outputs.resourceId : ''
    subnetId: vnetEnabled ? vnet.outputs.privateEndpointSubnetId : ''
  }
}

module keyVaultEndpoint 'modules/private-endpoint.bicep' = if (vnetEnabled) {
  name: 'keyVaultEndpoint'
  params: {
    name: '${abbrs.networkPrivateEndpoints}kv-${resourceToken}'
    location: location
    tags: tags
    serviceResourceId: keyVault.outputs.resourceId
    groupId: 'vault'
    privateDnsZoneName: 'privatelink.vaultcore.azure.net'
    virtualNetworkId: vnetEnabled ? vnet.outputs.resourceId : ''
    subnetId: vnetEnabled ? vnet.outputs.privateEndpointSubnetId : ''
  }
}

module rbac 'modules/rbac.bicep' = {
  name: 'rbac'
  params: {
    storageAccountName: storage.outputs.name
    applicationInsightsName: applicationInsights.outputs.name
    principalId: identity.outputs.principalId
  }
}

// The archive's container, its lifecycle policy and the app identity's role on it (docs/archive.md).
module archive 'modules/archive.bicep' = {
  name: 'archive'
  params: {
    storageAccountName: storage.outputs.name
    containerName: archiveContainerName
    heartbeatArchiveDays: heartbeatArchiveDays
    actionsCoolAfterDays: archiveActionsCoolAfterDays
    actionsColdAfterDays: archiveActionsColdAfterDays
    actionsArchiveTierAfterDays: archiveActionsArchiveTierAfterDays
    principalId: identity.outputs.principalId
  }
}

// Alerts on the app's metrics and its HTTP 5xx rate (docs/operations.md: Metrics and alerts).
module alerts 'modules/alerts.bicep' = {
  name: 'alerts'
  params: {
    location: location
    tags: tags
    namePrefix: 'alert-${resourceToken}'
    applicationInsightsName: applicationInsights.outputs.name
    logAnalyticsWorkspaceName: logAnalytics.outputs.name
    dailyCapGb: logDailyQuotaGb
    dailyCapWarningPercent: dailyCapWarningPercent
    actionGroupId: alertActionGroupId
    alertEmail: alertEmail
    notifySubscriptionOwners: alertSubscriptionOwners
    reportLagMinutes: alertReportLagMinutes
    pendingNotifications: alertPendingNotifications
    checkBudgetPeriodsInARow: alertCheckBudgetPeriodsInARow
    unavailableResponsesPer5Minutes: alertUnavailableResponsesPer5Minutes
    throttlesPer5Minutes: alertThrottlesPer5Minutes
    internalErrorsPer5Minutes: alertInternalErrorsPer5Minutes
    http5xxPercent: alertHttp5xxPercent
  }
}

// The workbook ops open first: the app's metrics and Cosmos DB's own on one page (docs/operations.md: The workbook).
module workbook 'modules/workbook.bicep' = {
  name: 'workbook'
  params: {
    location: location
    tags: tags
    applicationInsightsName: applicationInsights.outputs.name
    logAnalyticsWorkspaceName: logAnalytics.outputs.name
    cosmosAccountName: cosmos.outputs.name
  }
}

module functionApp 'modules/functionapp.bicep' = {
  name: 'functionApp'
  params: {
    name: functionAppName
    location: location
    tags: tags
    planId: plan.outputs.resourceId
    storageAccountName: storage.outputs.name
    deploymentContainerName: deploymentContainerName
    applicationInsightsName: applicationInsights.outputs.name
    identityId: identity.outputs.resourceId
    identityClientId: identity.outputs.clientId
    telemetrySettings: telemetrySettings
    appSettings: union(appSettings, appSettingOverrides, splitHttp ? httpFunctionsOff : {})
    maximumInstanceCount: maximumInstanceCount
    instanceMemoryMB: instanceMemoryMB
    httpAlwaysReadyInstances: httpAlwaysReadyInstances
    virtualNetworkSubnetId: vnetEnabled ? vnet.outputs.appSubnetId : ''
  }
  // Start the app only once its identity may read its storage, queue and secret, and write its archive, and (with
  // vnetEnabled) once it can reach them through their private endpoints.
  dependsOn: [
    rbac
    archive
    blobEndpoint
    queueEndpoint
    cosmosEndpoint
    keyVaultEndpoint
  ]
}

// The HTTP functions' app on its Dedicated plan (httpHostingPlan Dedicated): the same package, identity and settings.
module httpApp 'modules/httpapp.bicep' = if (splitHttp) {
  name: 'httpApp'
  params: {
    name: httpAppName
    location: location
    tags: tags
    planId: splitHttp ? httpPlan.outputs.resourceId : ''
    storageAccountName: storage.outputs.name
    applicationInsightsName: applicationInsights.outputs.name
    identityId: identity.outputs.resourceId
    identityClientId: identity.outputs.clientId
    telemetrySettings: telemetrySettings
    appSettings: union(appSettings, appSettingOverrides, backgroundFunctionsOff)
    workerProcessCount: httpWorkerProcessCount
    virtualNetworkSubnetId: vnetEnabled ? vnet.outputs.httpAppSubnetId : ''
  }
  dependsOn: [
    rbac
    archive
    blobEndpoint
    queueEndpoint
    cosmosEndpoint
    keyVaultEndpoint
  ]
}

// Names and addresses only: no key, connection string or secret is ever an output.
output AZURE_LOCATION string = location
output AZURE_TENANT_ID string = tenant().tenantId
output AZURE_RESOURCE_GROUP string = resourceGroup().name
output AZURE_FUNCTION_APP_NAME string = functionApp.outputs.name
output SERVICE_API_NAME string = functionApp.outputs.name
// The devices' and the operators' address: the HTTP app's when the HTTP functions have one of their own.
output AZURE_FUNCTION_APP_URL string = 'https://${splitHttp ? httpApp.outputs.defaultHostName : functionApp.outputs.defaultHostName}'
// The HTTP functions' own app (httpHostingPlan Dedicated; empty otherwise): infra/hooks/deploy-http-app.sh deploys to it.
output AZURE_HTTP_APP_NAME string = splitHttp ? httpApp.outputs.name : ''
output AZURE_COSMOS_ACCOUNT_NAME string = cosmos.outputs.name
output MONGODB_DATABASE string = cosmos.outputs.databaseName
output AZURE_KEY_VAULT_NAME string = keyVault.outputs.name
output AZURE_STORAGE_ACCOUNT_NAME string = storage.outputs.name
