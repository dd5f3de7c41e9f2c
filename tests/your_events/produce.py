"""Produces rankpulse's generated events in the shapes real search teams log them in, with real
client libraries: confluent-kafka's Producer, and its AvroSerializer and ProtobufSerializer with
its SchemaRegistryClient (against tests/your_events/registry.py). Every shape carries the same
events as the native files, each on the same partition, so rankpulse's metrics must be equal.

    python3 produce.py BROKERS REGISTRY_URL IMPRESSIONS ENGAGEMENTS OUT_DIR

Shapes (topics imp-SHAPE / eng-SHAPE, two partitions):
  native      the native lines as they are
  opensearch  impressions: an OpenSearch search response logged as is, experiment and variant
              in Kafka headers, the client id as the message key; engagements: Segment track
              events
  segment     Segment track events both ways ("Products Searched", "Product Clicked", ...), with
              "Page Viewed" events among the engagements (rankpulse counts them unmapped)
  ga4         GA4 events with event_params, timestamps in microseconds, some impressions
              without their search_id (rankpulse counts them missing_field)
  avro        Avro records as a Java team writes them; the impressions move to a compatible v2
              schema (a new optional field) a quarter of the way in; bad messages among them
  protobuf    Protobuf messages, the hit type imported from a second file (a registry
              reference), the engagement the file's second message (message index 1)

Phase 1 produces the first half of each file, prints "phase 1" and waits for a line on stdin
(the test stops the registry then); phase 2 produces the rest with the serializers' cached
schema ids, then prints "phase 2 COUNTS" (the messages per topic as JSON) and writes the JSON
shapes as JSON lines and the Avro ones as object container files to OUT_DIR for replay.
"""
import json
import os
import sys
import zlib
from datetime import datetime, timezone

import fastavro
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf import timestamp_pb2  # noqa: F401  (registers timestamp.proto in the pool)

PARTITIONS = 2
SHAPES = ["native", "opensearch", "segment", "ga4", "avro", "protobuf"]
ACTIONS_SEGMENT = {"click": "Product Clicked", "add_to_cart": "Product Added", "purchase": "Order Completed"}
ACTIONS_GA4 = {"click": "select_item", "add_to_cart": "add_to_cart", "purchase": "purchase"}
ACTIONS_AVRO = {"click": "CLICK", "add_to_cart": "ADD_TO_CART", "purchase": "PURCHASE"}


def iso(ms):
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def partition(query_id):
    return zlib.crc32(query_id.encode()) % PARTITIONS


# ---- the JSON shapes ----

def opensearch_impression(e):
    hits = [{"_index": "products", "_id": d, "_score": round(10.0 / (i + 1), 3),
             "_source": {"title": "product %s" % d, "in_stock": True}} for i, d in enumerate(e["results"])]
    body = {"took": 5, "timed_out": False, "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0},
            "hits": {"total": {"value": len(hits), "relation": "eq"}, "max_score": hits[0]["_score"] if hits else None,
                     "hits": hits},
            "ext": {"request_id": e["query_id"], "timestamp": iso(e["timestamp"]), "session": e.get("session_id")}}
    headers = [(k, e[f].encode()) for k, f in (("ab-experiment", "experiment"), ("ab-variant", "variant")) if f in e]
    return json.dumps(body), headers, e.get("client_id")


def segment_impression(e):
    props = {"search_id": e["query_id"], "query": "shoes",
             "products": [{"product_id": d, "position": i + 1} for i, d in enumerate(e["results"])]}
    if "experiment" in e:
        props["experiment_name"] = e["experiment"]
        props["variant_name"] = e["variant"]
    body = {"type": "track", "event": "Products Searched", "messageId": "m-" + e["query_id"],
            "timestamp": iso(e["timestamp"]), "userId": e.get("client_id"),
            "context": {"library": {"name": "analytics.js", "version": "4.1.0"}, "session_id": e.get("session_id")},
            "properties": props}
    return json.dumps(body)


def segment_engagement(e):
    body = {"type": "track", "event": ACTIONS_SEGMENT[e["action"]], "messageId": e["event_id"],
            "timestamp": iso(e["timestamp"]), "anonymousId": "anon",
            "properties": {"search_id": e["query_id"], "product_id": e["doc_id"], "position": e.get("position")}}
    return json.dumps(body)


def segment_page_view(i):
    return json.dumps({"type": "track", "event": "Page Viewed", "messageId": "pv-%d" % i,
                       "timestamp": iso(1795341600000 + i), "properties": {"path": "/cart"}})


def ga4_param(key, value):
    kind = "int_value" if isinstance(value, int) else "string_value"
    return {"key": key, "value": {kind: value}}


def ga4_impression(e, drop_search_id=False):
    params = [ga4_param("page_location", "https://shop.example/search?q=shoes")]
    if not drop_search_id:
        params.append(ga4_param("search_id", e["query_id"]))
    if "session_id" in e:
        params.append(ga4_param("ga_session_id", e["session_id"]))
    if "experiment" in e:
        params += [ga4_param("experiment", e["experiment"]), ga4_param("variant", e["variant"])]
    body = {"event_name": "view_search_results", "event_timestamp": str(e["timestamp"] * 1000 + 123),
            "user_pseudo_id": e.get("client_id"), "event_params": params,
            "items": [{"item_id": d, "index": i} for i, d in enumerate(e["results"])]}
    return json.dumps(body)


def ga4_engagement(e):
    params = [ga4_param("search_id", e["query_id"]), ga4_param("event_id", e["event_id"])]
    if "position" in e:
        params.append(ga4_param("index", e["position"]))
    body = {"event_name": ACTIONS_GA4[e["action"]], "event_timestamp": e["timestamp"] * 1000 + 999,
            "event_params": params, "items": [{"item_id": e["doc_id"], "quantity": 1}]}
    return json.dumps(body)


# ---- Avro, as a Java team would write it ----

def avro_impression_schema(v2):
    fields = [
        {"name": "searchId", "type": "string"},
        {"name": "occurredAt", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "experiment", "type": ["null", "string"], "default": None},
        {"name": "variant", "type": ["null", "string"], "default": None},
        {"name": "userId", "type": ["null", "string"], "default": None},
        {"name": "sessionId", "type": ["null", "string"], "default": None},
        {"name": "hits", "type": {"type": "array", "items": {
            "type": "record", "name": "Hit",
            "fields": [{"name": "documentId", "type": "string"}, {"name": "score", "type": "double"}]}}},
    ]
    if v2:
        fields.append({"name": "device", "type": ["null", "string"], "default": None})
    return {"type": "record", "name": "SearchImpression", "namespace": "com.acme.search.events", "fields": fields}


AVRO_ENGAGEMENT = {
    "type": "record", "name": "SearchEngagement", "namespace": "com.acme.search.events",
    "fields": [
        {"name": "searchId", "type": "string"},
        {"name": "occurredAt", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "documentId", "type": "string"},
        {"name": "action", "type": {"type": "enum", "name": "Action", "symbols": ["CLICK", "ADD_TO_CART", "PURCHASE"]}},
        {"name": "eventId", "type": "string"},
        {"name": "position", "type": ["null", "int"], "default": None},
    ],
}


def avro_impression(e, v2):
    record = {"searchId": e["query_id"], "occurredAt": e["timestamp"], "experiment": e.get("experiment"),
              "variant": e.get("variant"), "userId": e.get("client_id"), "sessionId": e.get("session_id"),
              "hits": [{"documentId": d, "score": 1.0 / (i + 1)} for i, d in enumerate(e["results"])]}
    if v2:
        record["device"] = "mobile"
    return record


def avro_engagement(e):
    return {"searchId": e["query_id"], "occurredAt": e["timestamp"], "documentId": e["doc_id"],
            "action": ACTIONS_AVRO[e["action"]], "eventId": e["event_id"], "position": e.get("position")}


# ---- Protobuf, built as protoc would (no protoc here: the descriptors are written out) ----

def field(name, number, kind, label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL, type_name=None):
    f = descriptor_pb2.FieldDescriptorProto(name=name, number=number, type=kind, label=label)
    if type_name:
        f.type_name = type_name
    return f


def protobuf_classes():
    T = descriptor_pb2.FieldDescriptorProto
    pool = descriptor_pool.Default()
    hit = descriptor_pb2.FileDescriptorProto(name="acme/search/v1/hit.proto", package="acme.search.v1", syntax="proto3")
    hit.message_type.add(name="Hit", field=[field("doc_id", 1, T.TYPE_STRING), field("score", 2, T.TYPE_FLOAT)])
    pool.Add(hit)
    events = descriptor_pb2.FileDescriptorProto(
        name="acme/search/v1/events.proto", package="acme.search.v1", syntax="proto3",
        dependency=["acme/search/v1/hit.proto", "google/protobuf/timestamp.proto"])
    events.message_type.add(name="SearchImpression", field=[
        field("search_id", 1, T.TYPE_STRING),
        field("time", 2, T.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp"),
        field("experiment", 3, T.TYPE_STRING), field("variant", 4, T.TYPE_STRING),
        field("user_id", 5, T.TYPE_STRING), field("session_id", 6, T.TYPE_STRING),
        field("hits", 7, T.TYPE_MESSAGE, label=T.LABEL_REPEATED, type_name=".acme.search.v1.Hit")])
    events.message_type.add(name="SearchEngagement", field=[
        field("search_id", 1, T.TYPE_STRING), field("time_ms", 2, T.TYPE_INT64),
        field("doc_id", 3, T.TYPE_STRING), field("action", 4, T.TYPE_STRING),
        field("event_id", 5, T.TYPE_STRING), field("position", 6, T.TYPE_INT32)])
    pool.Add(events)
    get = lambda name: message_factory.GetMessageClass(pool.FindMessageTypeByName(name))
    return get("acme.search.v1.SearchImpression"), get("acme.search.v1.SearchEngagement")


def protobuf_impression(cls, e):
    m = cls(search_id=e["query_id"], experiment=e.get("experiment", ""), variant=e.get("variant", ""),
            user_id=e.get("client_id", ""), session_id=e.get("session_id", ""))
    m.time.FromMilliseconds(e["timestamp"])
    for i, d in enumerate(e["results"]):
        m.hits.add(doc_id=d, score=1.0 / (i + 1))
    return m


def protobuf_engagement(cls, e):
    return cls(search_id=e["query_id"], time_ms=e["timestamp"], doc_id=e["doc_id"], action=e["action"],
               event_id=e["event_id"], position=e.get("position", 0))


def main():
    brokers, registry_url, impressions_file, engagements_file, out_dir = sys.argv[1:6]
    impressions = [json.loads(line) for line in open(impressions_file)]
    engagements = [json.loads(line) for line in open(engagements_file)]
    producer = Producer({"bootstrap.servers": brokers, "linger.ms": 5, "enable.idempotence": True})
    registry = SchemaRegistryClient({"url": registry_url})
    avro_v1 = AvroSerializer(registry, json.dumps(avro_impression_schema(False)))
    avro_v2 = AvroSerializer(registry, json.dumps(avro_impression_schema(True)))
    avro_eng = AvroSerializer(registry, json.dumps(AVRO_ENGAGEMENT))
    pb_imp_cls, pb_eng_cls = protobuf_classes()
    pb_imp = ProtobufSerializer(pb_imp_cls, registry, {"use.deprecated.format": False})
    pb_eng = ProtobufSerializer(pb_eng_cls, registry, {"use.deprecated.format": False})
    counts = {}
    files = {}

    def send(topic, value, part, key=None, headers=None):
        counts[topic] = counts.get(topic, 0) + 1
        while True:
            try:
                producer.produce(topic, value=value, key=key, partition=part, headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)

    def record(name, line):
        files.setdefault(name, []).append(line)

    def ctx(topic):
        return SerializationContext(topic, MessageField.VALUE)

    def produce(first, last, phase):
        for n, e in enumerate(impressions[first:last], start=first):
            p = partition(e["query_id"])
            native = json.dumps(e)
            send("imp-native", native, p)
            body, headers, key = opensearch_impression(e)
            send("imp-opensearch", body, p, key=key, headers=headers)
            record("opensearch-impressions", body)
            body = segment_impression(e)
            send("imp-segment", body, p)
            record("segment-impressions", body)
            body = ga4_impression(e)
            send("imp-ga4", body, p)
            record("ga4-impressions", body)
            v2 = n >= len(impressions) // 4
            serializer = avro_v2 if v2 else avro_v1
            send("imp-avro", serializer(avro_impression(e, v2), ctx("imp-avro")), p)
            send("imp-protobuf", pb_imp(protobuf_impression(pb_imp_cls, e), ctx("imp-protobuf")), p)
        for e in engagements[first * len(engagements) // len(impressions):last * len(engagements) // len(impressions)]:
            p = partition(e["query_id"])
            send("eng-native", json.dumps(e), p)
            body = segment_engagement(e)
            send("eng-opensearch", body, p)
            send("eng-segment", body, p)
            record("segment-engagements", body)
            body = ga4_engagement(e)
            send("eng-ga4", body, p)
            record("ga4-engagements", body)
            send("eng-avro", avro_eng(avro_engagement(e), ctx("eng-avro")), p)
            send("eng-protobuf", pb_eng(protobuf_engagement(pb_eng_cls, e), ctx("eng-protobuf")), p)
        # Hostile and foreign messages, counted by rankpulse and no part of the metrics.
        for i in range(5):
            send("eng-segment", segment_page_view(phase * 10 + i), i % PARTITIONS)
            send("imp-ga4", ga4_impression(impressions[first + i], drop_search_id=True), i % PARTITIONS)
        good = avro_v2(avro_impression(impressions[first], True), ctx("imp-avro"))
        send("imp-avro", b"\x00\x00\x00\x27\x0f" + good[5:], 0)  # schema id 9999: unknown
        send("imp-avro", good[:len(good) // 2], 1)  # truncated
        send("imp-avro", b"\x01" + good[1:], 0)  # wrong magic byte
        engagement = pb_eng(protobuf_engagement(pb_eng_cls, engagements[0]), ctx("eng-protobuf"))
        send("eng-protobuf", engagement[:-3], 1)  # truncated
        producer.flush(30)

    half = len(impressions) // 2
    produce(0, half, 1)
    print("phase 1", flush=True)
    sys.stdin.readline()
    produce(half, len(impressions), 2)
    for name, lines in files.items():
        with open(os.path.join(out_dir, name + ".jsonl"), "w") as f:
            f.write("".join(line + "\n" for line in lines))
    schema_v2 = fastavro.parse_schema(avro_impression_schema(True))
    with open(os.path.join(out_dir, "avro-impressions.avro"), "wb") as f:
        fastavro.writer(f, schema_v2, [avro_impression(e, True) for e in impressions], codec="deflate")
    with open(os.path.join(out_dir, "avro-engagements.avro"), "wb") as f:
        fastavro.writer(f, fastavro.parse_schema(AVRO_ENGAGEMENT), [avro_engagement(e) for e in engagements])
    print("phase 2 " + json.dumps(counts), flush=True)


if __name__ == "__main__":
    main()
