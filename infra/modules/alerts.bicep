// Azure Monitor alerts on what an operator must act on: the app's own metrics (shared/telemetry/metrics.py; OpenTelemetry,
// exported by the distro to Application Insights' customMetrics table, never sampled) and the HTTP 5xx rate of the
// Function App (its requests, which are sampled: counted by itemCount). One log search alert rule each, over the
// Application Insights component; and two rules on the Log Analytics workspace's ingestion, before and at the daily
// cap (`capRules`). tests/infra/test_infra.py checks that every pillbottle.* metric a rule queries is one the code
// emits, with its dimensions, and that every metric is alerted on here or shown on the workbook. docs/operations.md:
// Metrics and alerts.

param location string
param tags object = {}

@description('Prefix of the alert rule names.')
param namePrefix string

@description('Application Insights component the app sends its telemetry to: the scope of every rule on the app.')
param applicationInsightsName string

@description('Log Analytics workspace the component stores its telemetry in: the scope of the ingestion rules.')
param logAnalyticsWorkspaceName string

@description('The workspace\'s daily cap in GB (-1: none, and no ingestion rules).')
param dailyCapGb int = -1

@description('Alert when an hour\'s billable ingestion, kept up for a day, would reach this percentage of the daily cap.')
@minValue(1)
@maxValue(100)
param dailyCapWarningPercent int = 80

@description('Resource ID of an existing action group to notify (optional).')
param actionGroupId string = ''

@description('Email address the action group created here notifies (optional).')
param alertEmail string = ''

@description('The action group created here emails the subscription\'s Owners (an Azure Resource Manager role receiver).')
param notifySubscriptionOwners bool = true

@description('A report feed alerts when every consumer run of reportLagWindowMinutes left it more than this many minutes behind.')
param reportLagMinutes int = 10

@description('Minutes of the report lag condition; also how long without any consumer run alerts.')
@allowed([5, 10, 15, 30, 45, 60])
param reportLagWindowMinutes int = 15

@description('Notifications of a kind still waiting for the queue (added up over the check\'s partitions), after every check run of 15 minutes, above which to alert.')
param pendingNotifications int = 1000

@description('Consecutive 5-minute periods in which every run of a check partition stopped at its time budget before alerting.')
@minValue(1)
@maxValue(6)
param checkBudgetPeriodsInARow int = 3

@description('HTTP 503 answers of one function in 5 minutes above which to alert (the store stayed unavailable through its retries).')
param unavailableResponsesPer5Minutes int = 50

@description('Throttled database calls per 5 minutes above which to alert, when sustained for 3 periods in a row (15 minutes).')
param throttlesPer5Minutes int = 300

@description('HTTP 500 answers of one function in 5 minutes above which to alert (a fault: a bug, or a database error that is not transient).')
param internalErrorsPer5Minutes int = 0

@description('Percentage of HTTP requests answered 5xx in 5 minutes (of at least 20 requests) above which to alert.')
param http5xxPercent int = 5

resource applicationInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}

resource logAnalytics 'Microsoft.OperationalInsights/workspaces@2023-09-01' existing = {
  name: logAnalyticsWorkspaceName
}

// Owner, the built-in role (https://learn.microsoft.com/azure/role-based-access-control/built-in-roles/general#owner).
var ownerRoleId = '8e3af657-a8ff-443c-a75c-2fe8c4bcb635'
var emailReceivers = empty(alertEmail) ? [] : [
  {
    name: 'operator'
    emailAddress: alertEmail
    useCommonAlertSchema: true
  }
]
// An Azure Resource Manager role receiver emails the members of a built-in role ("Roles are Azure RBAC roles and
// only built-in roles are supported": ActionGroupData.ArmRoleReceivers, https://learn.microsoft.com/dotnet/api/
// azure.resourcemanager.monitor.actiongroupdata.armrolereceivers; New-AzActionGroupArmRoleReceiverObject's example
// is this Owner role id). With the defaults the alerts reach the subscription's Owners with no address to
// configure (docs/operations.md: Metrics and alerts).
var armRoleReceivers = notifySubscriptionOwners ? [
  {
    name: 'subscription-owners'
    roleId: ownerRoleId
    useCommonAlertSchema: true
  }
] : []
var notifies = (!empty(alertEmail)) || notifySubscriptionOwners

// The action group is the Azure Verified Module of Azure/bicep-registry-modules, tag avm/res/insights/action-group/0.8.0
// (`name`, `groupShortName`, `location`, `tags`, `emailReceivers`, `armRoleReceivers` are its parameters).
module actionGroup 'br/public:avm/res/insights/action-group:0.8.0' = if (notifies) {
  name: 'actionGroup'
  params: {
    name: '${namePrefix}-email'
    groupShortName: 'pillbottle'
    location: 'global'
    tags: tags
    emailReceivers: emailReceivers
    armRoleReceivers: armRoleReceivers
  }
}

var actionGroups = concat(empty(actionGroupId) ? [] : [actionGroupId], notifies ? [actionGroup.outputs.resourceId] : [])

// Each rule: the metrics it reads (`metrics`: pillbottle.* names of shared/telemetry/metrics.py, or `requests` for the 5xx
// rate); a KQL query returning one numeric `measure` column per `dimensions` and 5-minute bin (no measure: its rows
// are counted); and the condition: `aggregation` of the measure over `window` minutes, `comparison` with
// `threshold`, in each of `periods` consecutive windows.
var rules = [
  {
    name: 'report-lag'
    title: 'Reports lag behind their sources'
    description: 'Every report consumer run of the window left a feed more than reportLagMinutes behind (its checkpoint). The consumer is failing, throttled, or cannot keep up within REPORTS_TIME_BUDGET_SECONDS.'
    severity: 2
    metrics: ['pillbottle.reports.lag_seconds']
    query: '''
customMetrics
| where name == 'pillbottle.reports.lag_seconds'
| extend feed = tostring(customDimensions.feed)
| summarize lag_minutes = min(valueMin) / 60.0 by feed, bin(timestamp, 5m)
'''
    measure: 'lag_minutes'
    dimensions: ['feed']
    aggregation: 'Minimum'
    comparison: 'GreaterThan'
    threshold: reportLagMinutes
    window: reportLagWindowMinutes
    periods: 1
  }
  {
    name: 'report-feed-unpartitioned'
    title: 'A report feed cannot be partitioned'
    description: 'Cosmos DB answered GetChangeStreamTokens without tokens, or with tokens naming no feed range: the feed is not read at all until it does (docs/reports.md).'
    severity: 1
    metrics: ['pillbottle.reports.unpartitioned']
    query: '''
customMetrics
| where name == 'pillbottle.reports.unpartitioned'
| extend feed = tostring(customDimensions.feed)
| summarize failures = sum(valueSum) by feed, bin(timestamp, 5m)
'''
    measure: 'failures'
    dimensions: ['feed']
    aggregation: 'Total'
    comparison: 'GreaterThan'
    threshold: 0
    window: 5
    periods: 1
  }
  {
    name: 'report-feed-ranges-uncovered'
    title: 'A report feed has feed ranges no lease reads'
    description: 'Cosmos DB answered GetChangeStreamTokens with tokens whose feed ranges leave part of the hash space out (problem=gap: those documents are not read until a reply covers them; their old leases are kept and show in report-lag) or overlap (problem=overlap: read twice) (docs/reports.md).'
    severity: 1
    metrics: ['pillbottle.reports.uncovered_ranges']
    query: '''
customMetrics
| where name == 'pillbottle.reports.uncovered_ranges'
| extend feed = tostring(customDimensions.feed), problem = tostring(customDimensions.problem)
| summarize dispatches = sum(valueSum) by feed, problem, bin(timestamp, 5m)
'''
    measure: 'dispatches'
    dimensions: ['feed', 'problem']
    aggregation: 'Total'
    comparison: 'GreaterThan'
    threshold: 0
    window: 5
    periods: 1
  }
  {
    name: 'report-consumer-silent'
    title: 'The report consumer has not run'
    description: 'No report consumer run recorded its lag in the window: aggregate_reports is not running (timer, host or deployment), or its telemetry is off.'
    severity: 1
    metrics: ['pillbottle.reports.lag_seconds']
    query: '''
customMetrics
| where name == 'pillbottle.reports.lag_seconds'
'''
    measure: ''
    dimensions: []
    aggregation: 'Count'
    comparison: 'LessThan'
    threshold: 1
    window: reportLagWindowMinutes
    periods: 1
  }
  {
    name: 'notifications-pending'
    title: 'Notifications wait for the queue'
    description: 'Throughout the window, more than pendingNotifications notifications of a kind were still not handed to the queue after the check runs (each partition at its lowest in 5 minutes, added up over the partitions): raise QUEUE_MESSAGES_PER_PARTITION or CHECK_PARTITIONS, or look at why delivery fails.'
    severity: 2
    metrics: ['pillbottle.notifications.pending']
    query: '''
customMetrics
| where name == 'pillbottle.notifications.pending'
| extend kind = tostring(customDimensions.kind), partition = tostring(customDimensions.partition)
| summarize pending = min(valueMin) by kind, partition, bin(timestamp, 5m)
| summarize pending = sum(pending) by kind, timestamp
'''
    measure: 'pending'
    dimensions: ['kind']
    aggregation: 'Minimum'
    comparison: 'GreaterThan'
    threshold: pendingNotifications
    window: 15
    periods: 1
  }
  {
    name: 'check-time-budget'
    title: 'A check keeps running out of time'
    description: 'In each of checkBudgetPeriodsInARow 5-minute periods, every run of a check partition stopped at CHECKS_TIME_BUDGET_SECONDS with bottles left: that partition\'s sweep is falling behind (more trouble than it can write, or a slow store); raise CHECK_PARTITIONS.'
    severity: 2
    metrics: ['pillbottle.checks.runs', 'pillbottle.checks.budget_exhausted']
    query: '''
customMetrics
| where name in ('pillbottle.checks.runs', 'pillbottle.checks.budget_exhausted')
| extend kind = tostring(customDimensions.kind), partition = tostring(customDimensions.partition)
| summarize runs = sumif(valueSum, name == 'pillbottle.checks.runs'), exhausted = sumif(valueSum, name == 'pillbottle.checks.budget_exhausted') by kind, partition, bin(timestamp, 5m)
| extend every_run_exhausted = iff(runs > 0 and exhausted >= runs, 1, 0)
'''
    measure: 'every_run_exhausted'
    dimensions: ['kind', 'partition']
    aggregation: 'Maximum'
    comparison: 'GreaterThan'
    threshold: 0
    window: 5
    periods: checkBudgetPeriodsInARow
  }
  {
    name: 'http-503'
    title: 'Requests answered 503'
    description: 'A function answered more than unavailableResponsesPer5Minutes 503s in 5 minutes: the database stayed throttled or unreachable through the retries (or is not configured). Devices retry; look at the Cosmos DB throughput.'
    severity: 1
    metrics: ['pillbottle.http.responses_503']
    query: '''
customMetrics
| where name == 'pillbottle.http.responses_503'
| extend function_name = tostring(customDimensions['function'])
| summarize responses = sum(valueSum) by function_name, bin(timestamp, 5m)
'''
    measure: 'responses'
    dimensions: ['function_name']
    aggregation: 'Total'
    comparison: 'GreaterThan'
    threshold: unavailableResponsesPer5Minutes
    window: 5
    periods: 1
  }
  {
    name: 'store-throttled'
    title: 'The database keeps throttling'
    description: 'More than throttlesPer5Minutes throttled database calls (16500, or 50 when server-side retry ran out) in each of 3 periods of 5 minutes: raise the collections\' autoscale maximum (docs/costs.md).'
    severity: 2
    metrics: ['pillbottle.store.throttled']
    query: '''
customMetrics
| where name == 'pillbottle.store.throttled'
| summarize throttled = sum(valueSum) by bin(timestamp, 5m)
'''
    measure: 'throttled'
    dimensions: []
    aggregation: 'Total'
    comparison: 'GreaterThan'
    threshold: throttlesPer5Minutes
    window: 5
    periods: 3
  }
  {
    name: 'http-500'
    title: 'Requests answered 500'
    description: 'A function answered more than internalErrorsPer5Minutes 500s in 5 minutes (per function and error): a fault, not load. A bug, or a database error that is not transient (a bad query, a refused write, denied access: the error names its code). Each log line carries the error_id the client got.'
    severity: 1
    metrics: ['pillbottle.http.responses_500']
    query: '''
customMetrics
| where name == 'pillbottle.http.responses_500'
| extend function_name = tostring(customDimensions['function']), error = tostring(customDimensions.error)
| summarize responses = sum(valueSum) by function_name, error, bin(timestamp, 5m)
'''
    measure: 'responses'
    dimensions: ['function_name', 'error']
    aggregation: 'Total'
    comparison: 'GreaterThan'
    threshold: internalErrorsPer5Minutes
    window: 5
    periods: 1
  }
  {
    name: 'queue-poison-messages'
    title: 'Work messages given up (poison queue)'
    description: 'A queue message failed its last attempt (host.json maxDequeueCount) and the host moved it to <queue>-poison: a check partition or a report partition was not run for that message. Its error line (invocation ... failed, with function, error, dequeue_count) says why; the next dispatch sends the partition again.'
    severity: 2
    metrics: ['pillbottle.queue.poison_messages']
    query: '''
customMetrics
| where name == 'pillbottle.queue.poison_messages'
| extend function_name = tostring(customDimensions['function'])
| summarize messages = sum(valueSum) by function_name, bin(timestamp, 5m)
'''
    measure: 'messages'
    dimensions: ['function_name']
    aggregation: 'Total'
    comparison: 'GreaterThan'
    threshold: 0
    window: 5
    periods: 1
  }
  {
    name: 'http-5xx-rate'
    title: 'HTTP 5xx rate'
    description: 'More than http5xxPercent % of the Function App\'s HTTP requests in 5 minutes answered 5xx (of at least 20).'
    severity: 1
    metrics: ['requests']
    query: '''
requests
| summarize total = sum(itemCount), failed = sumif(itemCount, resultCode startswith '5') by bin(timestamp, 5m)
| where total >= 20
| extend failed_percent = 100.0 * failed / total
'''
    measure: 'failed_percent'
    dimensions: []
    aggregation: 'Maximum'
    comparison: 'GreaterThan'
    threshold: http5xxPercent
    window: 5
    periods: 1
  }
]

// The ingestion rules, over the Log Analytics workspace (its tables, not the component's): one before the daily
// cap and one when it is reached, from the daily cap page (https://learn.microsoft.com/azure/azure-monitor/logs/
// daily-cap, "Alert when daily cap is reached", read 2026-11-28). The first fires on a pace: billable ingestion
// (`_BilledSize`, https://learn.microsoft.com/azure/azure-monitor/logs/log-standard-columns) in the last hour that,
// kept up for a day, reaches dailyCapWarningPercent of the cap; that gives hours to act before the cap stops the
// telemetry the other rules read. Both only with a cap.
var ingestionRules = [
  {
    name: 'telemetry-ingestion-high'
    title: 'Telemetry ingestion on pace for the daily cap'
    description: 'In the last hour the workspace took more billable telemetry than, kept up for a day, dailyCapWarningPercent of its daily cap: at this pace telemetry (and every alert that reads it) stops for the rest of the day when the cap is reached. Find the source in the workbook (Cost drivers) or with union App* | summarize sum(_BilledSize) by Type; lower OTEL_TRACES_SAMPLER_ARG (traceSamplingRatio), or raise logDailyQuotaGb.'
    severity: 2
    query: '''
union withsource = table_name App*
| summarize megabytes = sum(_BilledSize) / 1e6 by bin(TimeGenerated, 5m)
'''
    measure: 'megabytes'
    aggregation: 'Total'
    comparison: 'GreaterThan'
    threshold: dailyCapGb * 1000 * dailyCapWarningPercent / 100 / 24
    window: 60
  }
  {
    name: 'telemetry-daily-cap-reached'
    title: 'Telemetry daily cap reached: telemetry stopped'
    description: 'The workspace reached its daily cap (logDailyQuotaGb) and stopped ingesting billable data until its reset hour: the app\'s metrics, logs and every alert on them are blind until then. Raise logDailyQuotaGb now if the day still matters; find what grew (workbook, Cost drivers).'
    severity: 1
    query: '''
_LogOperation
| where Category =~ 'Ingestion'
| where Detail contains 'OverQuota'
'''
    measure: ''
    aggregation: 'Count'
    comparison: 'GreaterThan'
    threshold: 0
    window: 5
  }
]
var capRules = dailyCapGb > 0 ? ingestionRules : []

resource capAlertRules 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = [
  for rule in capRules: {
    name: '${namePrefix}-${rule.name}'
    location: location
    tags: tags
    kind: 'LogAlert'
    properties: {
      displayName: rule.title
      description: rule.description
      severity: rule.severity
      enabled: true
      scopes: [
        logAnalytics.id
      ]
      evaluationFrequency: 'PT5M'
      windowSize: 'PT${rule.window}M'
      criteria: {
        allOf: [
          {
            query: rule.query
            timeAggregation: rule.aggregation
            metricMeasureColumn: empty(rule.measure) ? null : rule.measure
            operator: rule.comparison
            threshold: rule.threshold
            failingPeriods: {
              numberOfEvaluationPeriods: 1
              minFailingPeriodsToAlert: 1
            }
          }
        ]
      }
      autoMitigate: true
      actions: {
        actionGroups: actionGroups
      }
    }
  }
]

resource alertRules 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = [
  for rule in rules: {
    name: '${namePrefix}-${rule.name}'
    location: location
    tags: tags
    kind: 'LogAlert'
    properties: {
      displayName: rule.title
      description: rule.description
      severity: rule.severity
      enabled: true
      scopes: [
        applicationInsights.id
      ]
      evaluationFrequency: 'PT5M'
      windowSize: 'PT${rule.window}M'
      criteria: {
        allOf: [
          {
            query: rule.query
            timeAggregation: rule.aggregation
            metricMeasureColumn: empty(rule.measure) ? null : rule.measure
            operator: rule.comparison
            threshold: rule.threshold
            dimensions: [
              for dimension in rule.dimensions: {
                name: dimension
                operator: 'Include'
                values: ['*']
              }
            ]
            failingPeriods: {
              numberOfEvaluationPeriods: rule.periods
              minFailingPeriodsToAlert: rule.periods
            }
          }
        ]
      }
      autoMitigate: true
      actions: {
        actionGroups: actionGroups
      }
    }
  }
]
