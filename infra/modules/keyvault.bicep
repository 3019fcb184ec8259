// Key Vault holding the MongoDB connection string. The secret's value is read from the Cosmos DB account inside this
// deployment (listConnectionStrings), so it never appears in the repo, a parameter or an output; the Function App
// reads it through a Key Vault reference with its managed identity (Key Vault Secrets User on this vault).

param name string
param location string
param tags object = {}

@description('Cosmos DB account whose connection string is stored.')
param cosmosAccountName string

@description('Which account key the stored connection string uses; switch it to rotate the other key (docs/operations.md: Rotating keys).')
@allowed(['primary', 'secondary'])
param cosmosKeyInUse string = 'primary'

@description('Principal id of the Function App identity that reads the secret.')
param readerPrincipalId string

var secretName = 'mongodb-connection-string'
// listConnectionStrings() of a MongoDB account lists its connection strings, each with a `description` naming it:
// "Primary MongoDB Connection String", "Secondary MongoDB Connection String" and their read-only twins
// (https://learn.microsoft.com/rest/api/cosmos-db-resource-provider/database-accounts/list-connection-strings). The
// secret takes the one named for the key in use, not a position in the list, whose order no page promises; a name
// the list lacks fails the deployment rather than storing another key's string.
var connectionStringName = cosmosKeyInUse == 'primary' ? 'Primary MongoDB Connection String' : 'Secondary MongoDB Connection String'
var keyVaultSecretsUserRoleId = '4633458b-17de-408a-b874-0445c86b69e6'

resource cosmos 'Microsoft.DocumentDB/databaseAccounts@2024-05-15' existing = {
  name: cosmosAccountName
}

resource vault 'Microsoft.KeyVault/vaults@2023-07-01' = {
  name: name
  location: location
  tags: tags
  properties: {
    tenantId: subscription().tenantId
    sku: {
      family: 'A'
      name: 'standard'
    }
    enableRbacAuthorization: true
    enableSoftDelete: true
    softDeleteRetentionInDays: 7
    publicNetworkAccess: 'Enabled'
  }
}

resource mongoSecret 'Microsoft.KeyVault/vaults/secrets@2023-07-01' = {
  parent: vault
  name: secretName
  properties: {
    contentType: 'MongoDB connection string'
    value: filter(cosmos.listConnectionStrings().connectionStrings, entry => entry.description == connectionStringName)[0].connectionString
  }
}

resource secretsUser 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(vault.id, readerPrincipalId, keyVaultSecretsUserRoleId)
  scope: vault
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', keyVaultSecretsUserRoleId)
    principalId: readerPrincipalId
    principalType: 'ServicePrincipal'
  }
}

output name string = vault.name
// The versioned URI: a new secret version (a rotation) changes the app setting, so the app restarts on the new
// connection string at once instead of within the 24 h a versionless reference may take.
output mongoSecretUri string = mongoSecret.properties.secretUriWithVersion
