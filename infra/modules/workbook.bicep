// The workbook ops open first: the app's metrics (shared/telemetry/metrics.py, customMetrics in Application Insights) and
// Cosmos DB's own (normalized RU consumption, requests throttled with 16500) on one page, by job: ingestion,
// checks, reports and the archive, failures, Cosmos DB, cost drivers (docs/operations.md: The workbook). Its
// layout is infra/workbook.json, with the resource ids its queries read as placeholders replaced here;
// tests/infra/test_workbook.py checks every metric it names against the code, and docs/workbook.png is drawn from
// it (tools/workbook_picture.py). The resource: https://learn.microsoft.com/azure/templates/microsoft.insights/
// workbooks (2023-06-01: kind 'shared', a GUID name, serializedData the workbook's JSON; read 2026-11-28).

param location string
param tags object = {}

@description('Application Insights component the app sends its telemetry to: the source of the app\'s metrics.')
param applicationInsightsName string

@description('Log Analytics workspace of the component: the source of the ingestion (cost) query.')
param logAnalyticsWorkspaceName string

@description('Cosmos DB account whose platform metrics the workbook shows.')
param cosmosAccountName string

@description('The workbook\'s name in the portal (Monitor > Workbooks, or the component\'s Workbooks).')
param displayName string = 'Pill-bottle backend: health'

resource applicationInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}

resource logAnalytics 'Microsoft.OperationalInsights/workspaces@2023-09-01' existing = {
  name: logAnalyticsWorkspaceName
}

resource cosmos 'Microsoft.DocumentDB/databaseAccounts@2024-11-15' existing = {
  name: cosmosAccountName
}

var layout = loadTextContent('../workbook.json')
var withComponent = replace(layout, '__APP_INSIGHTS__', applicationInsights.id)
var withWorkspace = replace(withComponent, '__WORKSPACE__', logAnalytics.id)
var serialized = replace(withWorkspace, '__COSMOS_ACCOUNT__', cosmos.id)

resource workbook 'Microsoft.Insights/workbooks@2023-06-01' = {
  name: guid(resourceGroup().id, applicationInsightsName, 'pillbottle-health')
  location: location
  tags: tags
  kind: 'shared'
  properties: {
    displayName: displayName
    category: 'workbook'
    sourceId: applicationInsights.id
    serializedData: serialized
  }
}

output id string = workbook.id
