// Azure Cosmos DB for MongoDB (RU): the account, the app's database, and every collection with its shard key and
// indexes. The collections come from shared/store/schema.py (the one source the setup command also follows):
// `python -m tools.bicep_collections` prints the block below, and tests/infra/test_infra.py fails when they differ.
//
// Not the Azure Verified Module (avm/res/document-db/database-account), unlike the vault and the site: at its
// newest version in Azure/bicep-registry-modules (tag avm/res/document-db/database-account/0.20.1) a MongoDB
// collection (mongodb-database/collection/main.bicep) takes only `throughput int = 400`, always set as standard
// throughput, with no autoscale option, so every autoscale collection here would be turned to standard RU/s; the
// account's kind is MongoDB only when `mongodbDatabases` is given, and each database given there gets shared
// `throughput` (default 400) that a database created without it cannot take; its collections deploy in parallel
// (this file deploys them one at a time: @batchSize(1) below); and its connection-string outputs take the list by
// position (`connectionStrings[0]`), which keyvault.bicep does not. docs/operations.md: What `infra/` deploys.

@description('Cosmos DB account name (3-44 lowercase letters, digits and hyphens).')
param name string
param location string
param tags object = {}

@description('Database the app uses (MONGODB_DATABASE).')
param databaseName string

// The app's driver (pymongo 4.20, requirements.txt) speaks to MongoDB 4.4 and later only (wire version 9): a 4.2
// account (wire version 8) would be refused at its first command. Cosmos DB for MongoDB (RU) offers 5.0, 6.0 and 7.0
// (https://learn.microsoft.com/azure/cosmos-db/mongodb/feature-support-60), with change streams and custom commands.
@description('MongoDB server version the account speaks: 5.0 or later (the driver needs 4.4 or later).')
@allowed(['5.0', '6.0', '7.0'])
param serverVersion string = '6.0'

@description('Autoscale maximum RU/s of each collection with a shard key; Cosmos scales each between 10 % of it and it.')
@minValue(1000)
param defaultMaxThroughput int = 1000

@description('Per-collection autoscale maximum RU/s overriding defaultMaxThroughput, e.g. { bottle_heartbeats: 200000 } (collections with a shard key).')
param maxThroughputByCollection object = {}

// A collection without a shard key (`leases`) gets standard (manual) throughput, not autoscale. It is one logical
// partition: at most 10,000 RU/s and 20 GB ("Maximum RUs per partition (logical & physical)",
// https://learn.microsoft.com/azure/cosmos-db/concepts-limits). The two pages that say which autoscale maximum it may
// have disagree: "Use MongoDB extension commands" (CreateCollection,
// https://learn.microsoft.com/azure/cosmos-db/mongodb/custom-commands#create-collection) allows "a range from 4,000
// RU/s to 10,000 RU/s without a shard key", the autoscale FAQ ("What's the entry point RU/s for autoscale?",
// https://learn.microsoft.com/azure/cosmos-db/autoscale-faq) a maximum "as low as 1,000 RU/s". Standard throughput
// from 400 RU/s (the minimum, CreateCollection's default) up to 10,000 without a shard key is what the first page
// documents and the second does not touch. `leases` needs ~9 RU/s at the design scale (docs/costs.md).
@description('Standard (manual) RU/s of each collection without a shard key (`leases`): 400 to 10,000.')
@minValue(400)
@maxValue(10000)
param unshardedThroughput int = 400

// Standard (manual) throughput bills what is set every hour; autoscale bills each hour's peak at 1.5 x the rate
// (https://learn.microsoft.com/azure/cosmos-db/how-to-choose-offer). A collection busy at its peak most hours is
// cheaper on standard: the design-scale bill (benchmarks/design_scale.py) chooses per collection and writes the
// choice to design-scale.parameters.json (docs/costs.md: Throughput to deploy).
@description('Enabled, or Disabled when the account is reached through its private endpoint only (vnetEnabled).')
@allowed(['Enabled', 'Disabled'])
param publicNetworkAccess string = 'Enabled'

@description('Per-collection standard (manual) RU/s: a collection named here gets that fixed throughput instead of autoscale, e.g. { bottle_heartbeats: 195000 }.')
param standardThroughputByCollection object = {}


// Retention (the app settings of the same names; docs/architecture.md): each growing collection's TTL on `_ts`, so a
// document expires that many days after its last write. Cosmos DB deletes expired documents in the background,
// with throughput the collection does not otherwise use.
@description('Days an opened/closed event is kept after its last write (ACTIONS_RETENTION_DAYS).')
@minValue(2)
param actionsRetentionDays int = 60

@description('Days an hourly report is kept after its last write (HOURLY_REPORTS_RETENTION_DAYS).')
@minValue(2)
param hourlyReportsRetentionDays int = 60

@description('Days a notification is kept after its last write (NOTIFICATIONS_RETENTION_DAYS).')
@minValue(1)
param notificationsRetentionDays int = 90

@description('Days a daily report is kept after its last write (DAILY_REPORTS_RETENTION_DAYS).')
@minValue(2)
param dailyReportsRetentionDays int = 400

// One entry per collection of shared/store/schema.py collection_specs(): the shard key ('' = unsharded) and the indexes in
// ARM's form (key names only: ARM has no index direction or name; Cosmos serves a fully reversed sort from the same
// index). `_id` is always indexed; a TTL index is on `_ts` (a document's last write) for the days above. (4.2 also
// allows TTL on one custom field, with the EnableTtlOnCustomPath capability, instead of `_ts`:
// https://learn.microsoft.com/azure/cosmos-db/mongodb/feature-support-42#custom-ttl.)
// Each deployment sets a collection's whole index list: a changed key here would swap the old index for the new in
// one transformation, during which sorts that need either fail (code 2). Change keys with `./dev setup-store` first
// (it builds the new index beside the old, waits, then drops the old), then deploy this (docs/operations.md).
var collections = [
  {
    name: 'bottles'
    shardKey: 'bottle_id'
    indexes: [
      { key: { keys: ['_id'] } }
      { key: { keys: ['bucket', 'open_pending', 'open_since'] } }
      { key: { keys: ['bucket', 'open_pending', 'open_episode'] } }
      { key: { keys: ['bucket', 'dose_late_at'] } }
      { key: { keys: ['bucket', 'dose_pending', 'late_episode'] } }
    ]
  }
  {
    name: 'bottle_actions'
    shardKey: 'bottle_id'
    indexes: [
      { key: { keys: ['_id'] } }
      { key: { keys: ['bottle_id', 'time'] } }
      { key: { keys: ['received_at'] } }
      { key: { keys: ['user_id', 'time'] } }
      { key: { keys: ['_ts'] }, options: { expireAfterSeconds: actionsRetentionDays * 86400 } }
    ]
  }
  {
    name: 'bottle_heartbeats'
    shardKey: 'bottle_id'
    indexes: [
      { key: { keys: ['_id'] } }
      { key: { keys: ['ub', 'user_id'] } }
      { key: { keys: ['owners.user_id'] } }
      { key: { keys: ['bucket', 'silent_pending', 'alive_at'] } }
      { key: { keys: ['bucket', 'silent_pending', 'silent_episode'] } }
    ]
  }
  {
    name: 'notifications'
    shardKey: 'user_id'
    indexes: [
      { key: { keys: ['_id'] } }
      { key: { keys: ['user_id', 'feed_key'] } }
      { key: { keys: ['user_id', 'bottle_id', 'kind', 'episode_start'] } }
      { key: { keys: ['delivery', 'kind', 'created_at', 'bucket'] } }
      { key: { keys: ['_ts'] }, options: { expireAfterSeconds: notificationsRetentionDays * 86400 } }
    ]
  }
  {
    name: 'user_hourly_reports'
    shardKey: 'user_id'
    indexes: [
      { key: { keys: ['_id'] } }
      { key: { keys: ['user_id', 'hour'] } }
      { key: { keys: ['_ts'] }, options: { expireAfterSeconds: hourlyReportsRetentionDays * 86400 } }
    ]
  }
  {
    name: 'user_daily_reports'
    shardKey: 'user_id'
    indexes: [
      { key: { keys: ['_id'] } }
      { key: { keys: ['user_id', 'day'] } }
      { key: { keys: ['_ts'] }, options: { expireAfterSeconds: dailyReportsRetentionDays * 86400 } }
    ]
  }
  {
    name: 'leases'
    shardKey: ''
    indexes: [
      { key: { keys: ['_id'] } }
    ]
  }
]

resource account 'Microsoft.DocumentDB/databaseAccounts@2024-11-15' = {
  name: name
  location: location
  tags: tags
  kind: 'MongoDB'
  properties: {
    databaseAccountOfferType: 'Standard'
    locations: [
      {
        locationName: location
        failoverPriority: 0
        isZoneRedundant: false
      }
    ]
    consistencyPolicy: {
      defaultConsistencyLevel: 'Session'
    }
    apiProperties: {
      serverVersion: serverVersion
    }
    capabilities: [
      { name: 'EnableMongo' }
      // No server-side retry (DisableRateLimitingResponses): it is account-wide, and would hold a device's request
      // up to 60 s before code 50. The app sees 16500 at once and retries on the server's RetryAfterMs hint
      // within each invocation's deadline (shared/store/retries.py); see docs/cosmos-db.md, "Throttling".
    ]
    minimalTlsVersion: 'Tls12'
    publicNetworkAccess: publicNetworkAccess
    // Continuous backup, 7-day tier, chosen over periodic (docs/operations.md, "Backup and restore"): a restore to
    // any second of the last 7 days, self-service, at no backup-storage charge, in backup storage Cosmos DB makes
    // locally or zone redundant itself, so a region without a pair needs no choice of redundancy (periodic backup
    // there must be given one). What it excludes: partition merge (which would also end the change feed's reads
    // from a start time, the report feed's recovery), and a unique index added to an existing collection (the app
    // has none). https://learn.microsoft.com/azure/cosmos-db/continuous-backup-restore-introduction
    backupPolicy: {
      type: 'Continuous'
      continuousModeProperties: {
        tier: 'Continuous7Days'
      }
    }
    // Dynamic scaling: each physical partition (and region) of an autoscale collection scales, and bills, to its
    // own need rather than the busiest one's (https://learn.microsoft.com/azure/cosmos-db/autoscale-per-partition-region;
    // on by default for accounts created since 2024-09-25, set here for the others: API 2024-11-15 or later).
    enablePerRegionPerPartitionAutoscale: true
  }
}

resource database 'Microsoft.DocumentDB/databaseAccounts/mongodbDatabases@2024-11-15' = {
  parent: account
  name: databaseName
  properties: {
    resource: {
      id: databaseName
    }
  }
}

// One at a time: parallel control-plane changes (create, throughput) to one account's collections can conflict.
@batchSize(1)
resource collection 'Microsoft.DocumentDB/databaseAccounts/mongodbDatabases/collections@2024-11-15' = [
  for c in collections: {
    parent: database
    name: c.name
    properties: {
      resource: union(
        { id: c.name, indexes: c.indexes },
        empty(c.shardKey) ? {} : { shardKey: { '${c.shardKey}': 'Hash' } }
      )
      // Standard throughput without a shard key (`unshardedThroughput`, above); with one, standard where the design
      // scale's choice names the collection (`standardThroughputByCollection`), autoscale otherwise.
      options: empty(c.shardKey) ? { throughput: unshardedThroughput } : (contains(standardThroughputByCollection, c.name) ? {
        throughput: standardThroughputByCollection[c.name]
      } : {
        autoscaleSettings: {
          maxThroughput: contains(maxThroughputByCollection, c.name) ? maxThroughputByCollection[c.name] : defaultMaxThroughput
        }
      })
    }
  }
]

output name string = account.name
output resourceId string = account.id
output databaseName string = database.name
