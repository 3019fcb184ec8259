// Application Insights' daily cap (its pricing plan), set to the Log Analytics workspace's: for a workspace-based
// component the effective cap is the smaller of the two (https://learn.microsoft.com/azure/azure-monitor/logs/
// daily-cap, "Application Insights", read 2026-11-28). Properties: https://learn.microsoft.com/azure/templates/
// microsoft.insights/components/pricingplans (cap in GB a day; warningThreshold, a percentage of it, for the
// classic component's own warning email, kept on).

@description('Application Insights component whose cap this sets.')
param applicationInsightsName string

@minValue(1)
@description('Daily cap in GB.')
param dailyCapGb int

@minValue(1)
@maxValue(100)
@description('Percentage of the cap at which the component warns (its own notification).')
param warningPercent int = 80

resource applicationInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}

resource pricingPlan 'microsoft.insights/components/pricingPlans@2017-10-01' = {
  name: 'current'
  parent: applicationInsights
  properties: {
    planType: 'Basic'
    cap: dailyCapGb
    warningThreshold: warningPercent
    stopSendNotificationWhenHitCap: false
    stopSendNotificationWhenHitThreshold: false
  }
}
