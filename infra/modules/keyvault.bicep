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

@description('Enabled, or Disabled when the vault is reached through a private endpoint only (vnetEnabled).')
@allowed(['Enabled', 'Disabled'])
param publicNetworkAccess string = 'Enabled'

var secretName = 'mongodb-connection-string'
// listConnectionStrings() of a MongoDB account lists its connection strings, each with a `description` naming it:
// "Primary MongoDB Connection String", "Secondary MongoDB Connection String" and their read-only twins
// (https://learn.microsoft.com/rest/api/cosmos-db-resource-provider/database-accounts/list-connection-strings). The
// secret takes the one named for the key in use, not a position in the list, whose order no page promises; a name
// the list lacks fails the deployment rather than storing another key's string.
var connectionStringName = cosmosKeyInUse == 'primary' ? 'Primary MongoDB Connection String' : 'Secondary MongoDB Connection String'
var keyVaultSecretsUserRoleId = '4633458b-17de-408a-b874-0445c86b69e6'
var vaultResourceId = resourceId('Microsoft.KeyVault/vaults', name)

resource cosmos 'Microsoft.DocumentDB/databaseAccounts@2024-05-15' existing = {
  name: cosmosAccountName
}

// The vault is the Azure Verified Module (Azure/bicep-registry-modules, tag avm/res/key-vault/vault/0.14.0: every
// parameter below is one its avm/res/key-vault/vault/main.bicep declares; tests/avm_parameters.json lists them). Its
// defaults differ from what this vault was: premium SKU, purge protection, 90 days of soft delete and the vault
// open to VM deployment, template deployment and disk encryption. Each is set back below, so `azd down --purge`
// still removes the vault and no other service may read its secrets.
module vault 'br/public:avm/res/key-vault/vault:0.14.0' = {
  name: 'vault'
  params: {
    name: name
    location: location
    tags: tags
    sku: 'standard'
    enableRbacAuthorization: true
    enableSoftDelete: true
    softDeleteRetentionInDays: 7
    enablePurgeProtection: false
    enableVaultForDeployment: false
    enableVaultForTemplateDeployment: false
    enableVaultForDiskEncryption: false
    // vnetEnabled: reachable only through its private endpoint (main.bicep); ARM still writes the secret.
    publicNetworkAccess: publicNetworkAccess
    secrets: [
      {
        name: secretName
        contentType: 'MongoDB connection string'
        value: filter(cosmos.listConnectionStrings().connectionStrings, entry => entry.description == connectionStringName)[0].connectionString
      }
    ]
    roleAssignments: [
      {
        // The name the assignment had before the module (guid of the vault, the reader and the role): a
        // redeployment updates it rather than failing on a second assignment of the same role.
        name: guid(vaultResourceId, readerPrincipalId, keyVaultSecretsUserRoleId)
        roleDefinitionIdOrName: keyVaultSecretsUserRoleId
        principalId: readerPrincipalId
        principalType: 'ServicePrincipal'
      }
    ]
  }
}

output name string = vault.outputs.name
output resourceId string = vault.outputs.resourceId
// The versioned URI: a new secret version (a rotation) changes the app setting, so the app restarts on the new
// connection string at once instead of within the 24 h a versionless reference may take.
output mongoSecretUri string = vault.outputs.secrets[0].uriWithVersion
