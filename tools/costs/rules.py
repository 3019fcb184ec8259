"""The cost model's rules: one row per rule, each with the Microsoft page it comes from (read on READ_ON) and a
worked example from that page that tests/tools/test_cost_model.py checks against the code: tools/costs/request_units.py
for what an operation costs, tools/costs/billing.py for what the account bills. Where the documentation gives no
figure, ASSUMPTIONS says what the model takes instead; `./dev bench --mongodb-uri` (benchmarks/calibrate.py) prints
the charge a real account reports beside the model's, operation by operation. There is one bill, the honest one: no
optimistic line.

The pages and the rules stand here together, and the code that applies them imports nothing back from here but
the price's pages, so a rule can be checked against its page without reading the code.
"""

from dataclasses import dataclass

READ_ON = "2026-11-27"  # the date every page below was read for its figures

# --- sources -----------------------------------------------------------------------------------------------

RU_CONSUMPTION = "https://learn.microsoft.com/azure/cosmos-db/understand-request-unit-consumption"
REQUEST_UNITS = "https://learn.microsoft.com/azure/cosmos-db/request-units"
READS_WRITES = "https://learn.microsoft.com/azure/cosmos-db/optimize-cost-reads-writes"
MONGO_INDEXING = "https://learn.microsoft.com/azure/cosmos-db/mongodb/indexing"
QUERY_CONTAINER = "https://learn.microsoft.com/azure/cosmos-db/how-to-query-container"
AUTOSCALE = "https://learn.microsoft.com/azure/cosmos-db/provision-throughput-autoscale"
AUTOSCALE_FAQ = "https://learn.microsoft.com/azure/cosmos-db/autoscale-faq"
CHOOSE_OFFER = "https://learn.microsoft.com/azure/cosmos-db/how-to-choose-offer"
DYNAMIC_SCALING = "https://learn.microsoft.com/azure/cosmos-db/autoscale-per-partition-region"
DEVBLOGS = "https://devblogs.microsoft.com/cosmosdb"
DYNAMIC_SCALING_GA = f"{DEVBLOGS}/announcing-the-ga-of-dynamic-scaling-per-region-and-per-partition-autoscale"
RESERVED_CAPACITY = "https://learn.microsoft.com/azure/cosmos-db/reserved-capacity"
SET_THROUGHPUT = "https://learn.microsoft.com/azure/cosmos-db/set-throughput"
LIMITS = "https://learn.microsoft.com/azure/cosmos-db/concepts-limits"
PARTITIONING = "https://learn.microsoft.com/azure/cosmos-db/partitioning-overview"
TIME_TO_LIVE = "https://learn.microsoft.com/azure/cosmos-db/time-to-live"
REGIONS = "https://learn.microsoft.com/azure/cosmos-db/optimize-cost-regions"
STORAGE_COST = "https://learn.microsoft.com/azure/cosmos-db/optimize-cost-storage"

# The pages of the price the bill uses (tools/costs/billing.py: Price), quoted with the figures read on them.
PRICE_SOURCE = (
    f"{REGIONS} (page dated 2021-08-26, read {READ_ON}: $0.008 per 100 RU/s per hour with a single write "
    f"region, storage $0.25 per GB-month, 730 hours a month); {CHOOSE_OFFER} and {AUTOSCALE_FAQ} (read "
    f"{READ_ON}: autoscale 1.5 x the standard rate, single write region); "
    "https://azure.microsoft.com/pricing/details/cosmos-db/ for today's price in your region"
)


@dataclass(frozen=True)
class Rule:
    name: str
    statement: str
    source: str
    example: str  # a worked example from the source; tests/tools/test_cost_model.py checks the code against it


RULES = (
    Rule(
        "point read",
        "reading one document by its `_id` and shard key costs 1 RU up to 1 KB (an item under 1 KB costs as 1 KB), "
        "then by the size table: 1.04 at 2 KB, 1.14 at 4, 1.33 at 8 ... 9.95 at 128",
        f"{REQUEST_UNITS}; {RU_CONSUMPTION} (Document size)",
        "a 300-byte document: 1 RU; 1 KB: 1 RU; 128 KB: 9.95 RU",
    ),
    Rule(
        "write, by size",
        "writing a document costs about 5 RU up to 1 KB (an item under 1 KB costs as 1 KB), then by the size "
        "table: 6.29 at 2 KB, 6.67 at 4, 7.04 at 8 ... 48.19 at 128",
        f"{RU_CONSUMPTION} (Document size); {READS_WRITES}",
        "a 300-byte document: 4.95 RU; 2 KB: 6.29 RU",
    ),
    Rule(
        "create",
        "the size-based write plus 0.2 RU per index term inserted",
        f"{RU_CONSUMPTION} (Write operations: Create)",
        "1 KB with 10 terms: 4.95 + 0.2 x 10 = 6.95 RU (the page: about 7)",
    ),
    Rule(
        "update (replace)",
        "deleting the old document and inserting the new one, plus 0.2 RU per modified index term deleted and per "
        "one inserted",
        f"{RU_CONSUMPTION} (Updates (replace))",
        "1 KB changing two terms: 4.95 + 4.95 + 0.2 x 2 + 0.2 x 2 = 10.7 RU (the page: about 10.8)",
    ),
    Rule(
        "delete",
        "the size-based write plus 0.2 RU per index term deleted",
        f"{RU_CONSUMPTION} (Delete)",
        "1 KB with 10 terms: 6.95 RU (the page: about 7)",
    ),
    Rule(
        "query and change feed, documents",
        "each document a query or a feed returns costs what its point read does (floored at 1 KB), and a request "
        "no less than one point read",
        f"{RU_CONSUMPTION} (Feed operations: five 1 KB documents cost about five point reads; Query Operations); "
        f"{REQUEST_UNITS}",
        "a feed page of five 1 KB documents: 5 RU; an empty page: 1 RU",
    ),
    Rule(
        "query fan-out",
        "a query whose filter does not pin the shard key to one value runs against every physical partition's "
        "own index and pays about 2.5 RU for each partition it reaches, on top of its documents; one that names "
        "k values with `$in` reaches the partitions holding them (P x (1 - (1 - 1/P)^k) of P, on average)",
        f"{QUERY_CONTAINER} (Cross-partition query: 'it must fan out to all physical partitions where it's run "
        "against each partition's index'); the ~2.5 RU per partition is this model's assumption, stated "
        "in no Microsoft page: calibrate it on an account (./dev bench --mongodb-uri)",
        "a sorted page over 200 partitions: 200 x 2.5 = 500 RU plus its documents; `$in` of 200 users over "
        "191 partitions reaches 124.2 of them: 310 RU",
    ),
    Rule(
        "index terms",
        "the API for MongoDB indexes `_id` and the shard key by itself, and the indexes created; a compound "
        "index is one term per document, an indexed array one term per element (multikey)",
        f"{MONGO_INDEXING}",
        "an action with (bottle_id, time), received_at, (user_id, time) and a TTL: 6 terms with `_id`, the shard "
        "key and `_ts`",
    ),
    Rule(
        "autoscale bills each hour's peak",
        "each hour bills the highest RU/s the system scaled to within that hour, and at least 0.1 x the maximum "
        "RU/s (Tmax); so a burst bills its peak for the whole hour",
        f"{AUTOSCALE} ('billed for the highest RU/s the system scaled to in the hour, or 0.1*Tmax, whichever is "
        f"higher'); {AUTOSCALE_FAQ}",
        "Tmax 10,000: an hour that peaked at 6,000 bills 6,000; an idle hour bills 1,000",
    ),
    Rule(
        "standard (manual) throughput",
        "a container set to T RU/s bills T every hour at the standard rate, however little it uses, and "
        "rate-limits (16500) a second that needs more; T is spread evenly over its physical partitions, so a "
        "partition serves T / P; T is at least MAX(400, 1 RU/s per GB stored, the highest T ever set / 100), "
        "in steps of 100",
        f"{CHOOSE_OFFER} (Billing model: 'billed for the RU/s provisioned, regardless of how many RUs were "
        f"consumed'); {SET_THROUGHPUT} (throughput 'evenly distributed among its physical partitions'); {LIMITS} "
        "(Minimum throughput limits; Minimum RU/s required per 1 GB: 1 RU/s)",
        "400 RU/s standard bills 400 in hour 1 and in hour 2; a container raised to 50,000 RU/s holding 20 GB "
        "may go back down to MAX(400, 20 x 1, 50,000 / 100) = 500 RU/s",
    ),
    Rule(
        "standard or autoscale",
        "each collection takes the cheaper of standard throughput at its busiest minute (and its minimum) and "
        "autoscale billed hour by hour at 1.5 x the standard rate: standard saves where the hours bill, on "
        "average, more than two thirds of the standard figure; the page's rule of thumb, 'use the full amount "
        "for 66 % of hours or more', is the same comparison with the other hours idle",
        f"{CHOOSE_OFFER} ('When to use it'; 'The autoscale rate per RU/s is 1.5 x the standard (manual) rate'); "
        f"{AUTOSCALE_FAQ} (single write region: 1.5 x)",
        "Tmax 4,000 scaled to 3,500 in hour 1 and idle in hour 2 bills 3,500 and 400 at 1.5 x: 5,850 "
        "standard-rate RU/s-hours, against 8,000 for 4,000 standard: autoscale; the same maximum used in 66 % "
        "of the hours and idle in the rest bills 1.5 x (0.66 + 0.34 x 0.1) = 1.04 x standard: standard",
    ),
    Rule(
        "dynamic scaling (per partition and region)",
        "with dynamic scaling each physical partition (and region) of an autoscale container scales, and bills, "
        "to its own hourly peak, at least its share of 0.1 x Tmax; without it every partition scales to the "
        "busiest one's need; the app's deployment enables it (enablePerRegionPerPartitionAutoscale): it is on by "
        "default for accounts created since its general availability (2024-09-25)",
        f"{DYNAMIC_SCALING} (Example); {DYNAMIC_SCALING_GA}; {AUTOSCALE_FAQ} ('How can I enable dynamic "
        "autoscale': enablePerRegionPerPartitionAutoscale, API 2024-11-15 or later)",
        "1,000 RU/s over 2 partitions and 2 regions, peaks 500 and 200 (write region), 150 and 50 (read region): "
        "2,000 RU/s billed scaled to the busiest, 900 with dynamic scaling",
    ),
    Rule(
        "reserved capacity",
        "a reservation is a purchase of standard RU/s for one or three years at a discount (up to 63 %), which "
        "covers that much provisioned throughput each hour, the rest billed pay as you go; an autoscale RU/s "
        "uses 1.5 of them: a separate line, not a design choice",
        f"{RESERVED_CAPACITY} ('save up to 63%'; 'if 10,000 RU/s is your consistent hourly usage, buy 10,000'); "
        f"{AUTOSCALE_FAQ} ('to cover 10,000 autoscale RU/s, plan to buy 15,000')",
        "10,000 RU/s of autoscale billed every hour needs 15,000 RU/s reserved; at 63 % off, 10,000 RU/s "
        "standard for a month costs $584 x 0.37 = $216",
    ),
    Rule(
        "storage floor",
        "the smallest autoscale maximum a container may have is MAX(1,000, the highest maximum ever set / 10, "
        "the GB stored (data and index) x 10), rounded up to 1,000 RU/s, and Cosmos DB raises it by itself",
        f"{AUTOSCALE} (Minimum autoscale max RU/s for a container)",
        "9,531 GB stored: at least 96,000 RU/s maximum, so every hour bills at least 9,600",
    ),
    Rule(
        "physical partitions",
        "a physical partition holds up to 50 GB and serves up to 10,000 RU/s: a container has at least "
        "MAX(GB / 50, maximum RU/s / 10,000) of them, and each splits as it grows",
        f"{LIMITS} (Maximum RUs per partition: 10,000); {PARTITIONING} (50 GB per physical partition)",
        "9,531 GB at a 96,000 RU/s maximum: 191 partitions",
    ),
    Rule(
        "TTL deletes are not billed",
        "with provisioned throughput, expired items are deleted with leftover RUs that user requests did not "
        "consume: they add nothing to the hour's peak",
        f"{TIME_TO_LIVE} ('For provisioned throughput accounts, the deletion of expired items uses leftover RUs')",
        "60 days of actions expiring: 0 RU/s billed",
    ),
    Rule(
        "regions",
        "the throughput configured is reserved in each region of the account: T RU/s in N regions bills T x N "
        "(every write is applied, and charged, again in each region); storage is billed in each region too",
        f"{REGIONS}; {STORAGE_COST}",
        "10,000 RU/s and 512 GB in 2 regions: 20,000 RU/s and 1,024 GB billed",
    ),
    Rule(
        "price",
        "autoscale with one write region: $0.012 per 100 RU/s per hour (1.5 x the standard $0.008), storage "
        "$0.25 per GB-month, 730 hours a month",
        PRICE_SOURCE,
        "10,000 RU/s standard for a month: 100 x 730 x $0.008 = $584; autoscale billed 10,000 every hour: $876; "
        "512 GB: $128",
    ),
)

ASSUMPTIONS = (
    "An update through the API for MongoDB is charged as a replace of the whole document (not as a patch).",
    "A findAndModify is an update plus a point read of the document it returns (its reply).",
    "A write whose filter matches nothing costs a point read of the document it looked at.",
    "A document's `_ts` is an index term when its collection has a TTL index: every write replaces it.",
    "A query's documents cost what their point reads do (each floored at 1 KB) on top of the partitions it "
    "reaches: the documentation gives no per-document figure for queries over small items, so this is the "
    "pessimistic reading; calibrate on a real account.",
    "Load spreads evenly over a container's physical partitions (PARTITION_SKEW: the busiest partition's share "
    "against the average): keys hashed over millions of bottles and users; a skew would raise what standard "
    "throughput must be set to (T / P per partition), and what autoscale without dynamic scaling bills.",
    "Standard throughput set at the busiest minute (STANDARD_HEADROOM above it) serves the seconds within it: the "
    "steady load is thousands of small requests a second; a second above it is rate-limited and retried "
    "(shared/store/retries.py).",
)
