// A private endpoint of one service (vnetEnabled) and the private DNS zone that resolves the service's own host
// name to it inside the virtual network, as the azd Flex Consumption templates make them (their
// infra/app/storage-PrivateEndpoint.bicep). Zone names: "Azure Private Endpoint private DNS zone values"
// (https://learn.microsoft.com/azure/private-link/private-endpoint-dns). Azure Verified Modules of
// Azure/bicep-registry-modules at the templates' versions: tag avm/res/network/private-dns-zone/0.7.1 (`name`,
// `location`, `tags`, `virtualNetworkLinks`) and tag avm/res/network/private-endpoint/0.11.0 (`name`, `location`,
// `tags`, `subnetResourceId`, `privateLinkServiceConnections`, `privateDnsZoneGroup`).

@description('Name of the private endpoint.')
param name string
param location string
param tags object = {}

@description('Resource ID of the service the endpoint connects to.')
param serviceResourceId string

@description('The service\'s sub-resource (group ID): blob, queue, MongoDB, vault.')
param groupId string

@description('Private DNS zone of that sub-resource, e.g. privatelink.blob.core.windows.net.')
param privateDnsZoneName string

param virtualNetworkId string
param subnetId string

// Tag avm/res/network/private-dns-zone/0.7.1.
module privateDnsZone 'br/public:avm/res/network/private-dns-zone:0.7.1' = {
  name: '${name}-dns'
  params: {
    name: privateDnsZoneName
    location: 'global'
    tags: tags
    virtualNetworkLinks: [
      {
        name: '${name}-link'
        virtualNetworkResourceId: virtualNetworkId
        registrationEnabled: false
        location: 'global'
        tags: tags
      }
    ]
  }
}

// Tag avm/res/network/private-endpoint/0.11.0.
module privateEndpoint 'br/public:avm/res/network/private-endpoint:0.11.0' = {
  name: name
  params: {
    name: name
    location: location
    tags: tags
    subnetResourceId: subnetId
    privateLinkServiceConnections: [
      {
        name: name
        properties: {
          privateLinkServiceId: serviceResourceId
          groupIds: [
            groupId
          ]
        }
      }
    ]
    privateDnsZoneGroup: {
      privateDnsZoneGroupConfigs: [
        {
          privateDnsZoneResourceId: privateDnsZone.outputs.resourceId
        }
      ]
    }
  }
}

output resourceId string = privateEndpoint.outputs.resourceId
