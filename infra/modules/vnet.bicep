// The virtual network of vnetEnabled, as the azd Flex Consumption templates make it (their infra/app/vnet.bicep):
// one subnet for the private endpoints of storage, Cosmos DB and Key Vault, one delegated to
// Microsoft.App/environments for the Function App's regional virtual network integration (Flex Consumption's
// delegation), and one delegated to Microsoft.Web/serverFarms for the HTTP app when it runs on a Dedicated plan of
// its own (httpHostingPlan; a subnet takes one delegation, and one plan's apps). Azure Verified Module of Azure/bicep-registry-modules, tag avm/res/network/virtual-network/0.6.1
// (the templates' version): `name`, `addressPrefixes`, `location`, `tags` and `subnets` (name, addressPrefix,
// delegation, privateEndpointNetworkPolicies, privateLinkServiceNetworkPolicies) are its parameters.

param name string
param location string
param tags object = {}

@description('Address space of the network.')
param addressPrefix string = '10.0.0.0/16'

@description('Subnet of the private endpoints.')
param privateEndpointSubnetPrefix string = '10.0.1.0/24'

@description('Subnet the Function App integrates with (a /24 leaves room for Flex Consumption\'s scale-out).')
param appSubnetPrefix string = '10.0.2.0/24'

@description('Subnet the HTTP app on its Dedicated plan integrates with (httpHostingPlan Dedicated).')
param httpAppSubnetPrefix string = '10.0.3.0/24'

var privateEndpointSubnetName = 'private-endpoints'
var appSubnetName = 'app'
var httpAppSubnetName = 'http-app'

// Tag avm/res/network/virtual-network/0.6.1.
module virtualNetwork 'br/public:avm/res/network/virtual-network:0.6.1' = {
  name: 'virtualNetwork'
  params: {
    name: name
    location: location
    tags: tags
    addressPrefixes: [
      addressPrefix
    ]
    subnets: [
      {
        name: privateEndpointSubnetName
        addressPrefix: privateEndpointSubnetPrefix
        privateEndpointNetworkPolicies: 'Disabled'
        privateLinkServiceNetworkPolicies: 'Enabled'
      }
      {
        name: appSubnetName
        addressPrefix: appSubnetPrefix
        privateEndpointNetworkPolicies: 'Disabled'
        privateLinkServiceNetworkPolicies: 'Enabled'
        delegation: 'Microsoft.App/environments'
      }
      {
        name: httpAppSubnetName
        addressPrefix: httpAppSubnetPrefix
        privateEndpointNetworkPolicies: 'Disabled'
        privateLinkServiceNetworkPolicies: 'Enabled'
        delegation: 'Microsoft.Web/serverFarms'
      }
    ]
  }
}

output resourceId string = virtualNetwork.outputs.resourceId
output privateEndpointSubnetId string = '${virtualNetwork.outputs.resourceId}/subnets/${privateEndpointSubnetName}'
output appSubnetId string = '${virtualNetwork.outputs.resourceId}/subnets/${appSubnetName}'
output httpAppSubnetId string = '${virtualNetwork.outputs.resourceId}/subnets/${httpAppSubnetName}'
