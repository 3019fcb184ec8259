// The archive (docs/archive.md): its container in the app's storage account; the lifecycle management policy that
// keeps the events for good, moving their files to cooler tiers as they age, and deletes the heartbeat files
// heartbeatArchiveDays after their last write; and the app identity's Storage Blob Data Contributor role on the
// container (the least role its reads and writes need, explicit so that they keep working if the broader role the
// host's storage needs is ever narrowed).
//
// Lifecycle management: https://learn.microsoft.com/azure/storage/blobs/lifecycle-management-overview (a rule
// filters block blobs by a `container/prefix` and moves or deletes them some days after their last modification;
// the policy runs about once a day). Cool, cold and archive tiers and their minimum days:
// https://learn.microsoft.com/azure/storage/blobs/access-tiers-overview (the archive tier is offline: a blob there
// must be rehydrated, which takes hours, before any reader can read it).

@description('Name of the existing storage account (the host\'s).')
param storageAccountName string

@description('The archive\'s container (ARCHIVE_CONTAINER).')
param containerName string

@description('Days after their last write that heartbeat files are deleted (HEARTBEAT_ARCHIVE_DAYS).')
@minValue(1)
param heartbeatArchiveDays int

@description('Days after their last write that event files move to the cool tier.')
@minValue(1)
param actionsCoolAfterDays int

@description('Days after their last write that event files move to the cold tier (more than the cool days).')
@minValue(2)
param actionsColdAfterDays int

@description('Days after their last write that event files move to the archive tier (offline: rehydrate to read); 0: never.')
@minValue(0)
param actionsArchiveTierAfterDays int

@description('Principal id of the app\'s user-assigned identity.')
param principalId string

var storageBlobDataContributor = 'ba92f5b4-2d11-453d-a403-e96b0029c9fe'
var actionTiers = union(
  {
    tierToCool: { daysAfterModificationGreaterThan: actionsCoolAfterDays }
    tierToCold: { daysAfterModificationGreaterThan: actionsColdAfterDays }
  },
  (actionsArchiveTierAfterDays > 0) ? { tierToArchive: { daysAfterModificationGreaterThan: actionsArchiveTierAfterDays } } : {}
)

resource storage 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2023-05-01' existing = {
  name: 'default'
  parent: storage
}

resource container 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = {
  name: containerName
  parent: blobService
  properties: {
    publicAccess: 'None'
  }
}

// The account's one lifecycle policy (its name is always `default`): these two rules only, by prefix.
resource lifecycle 'Microsoft.Storage/storageAccounts/managementPolicies@2023-05-01' = {
  name: 'default'
  parent: storage
  properties: {
    policy: {
      rules: [
        {
          name: 'archive-actions-kept-for-good'
          enabled: true
          type: 'Lifecycle'
          definition: {
            filters: {
              blobTypes: ['blockBlob']
              prefixMatch: ['${containerName}/actions/']
            }
            actions: {
              baseBlob: actionTiers
            }
          }
        }
        {
          name: 'archive-heartbeats-deleted'
          enabled: true
          type: 'Lifecycle'
          definition: {
            filters: {
              blobTypes: ['blockBlob']
              prefixMatch: ['${containerName}/heartbeats/']
            }
            actions: {
              baseBlob: {
                delete: { daysAfterModificationGreaterThan: heartbeatArchiveDays }
              }
            }
          }
        }
      ]
    }
  }
  dependsOn: [
    container
  ]
}

resource blobDataContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(container.id, principalId, storageBlobDataContributor)
  scope: container
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', storageBlobDataContributor)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

output containerName string = container.name
