"""A Schema Registry for the tests: the documented REST endpoints of Confluent's Schema Registry
(https://docs.confluent.io/platform/current/schema-registry/develop/api.html) that producers
and rankpulse use, served from memory. No Schema Registry server is installable on these
machines (Confluent's and Apicurio's need Java artifacts from a registry they cannot reach, and
there is none on PyPI), so the test serves the API itself; the producers are confluent-kafka's
own SchemaRegistryClient and serializers, and rankpulse is the real binary.

    python3 registry.py PORT_FILE    writes the port it listens on to PORT_FILE, serves until killed

With REGISTRY_BASIC_AUTH=user:password or REGISTRY_BEARER_TOKEN=token in the environment, every
request must carry those credentials (401 otherwise), as a secured registry asks. With
REGISTRY_TLS_CERT and REGISTRY_TLS_KEY (PEM files), it serves HTTPS.
"""
import ssl
import base64
import os
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

LOCK = threading.Lock()
SCHEMAS = []  # id - 1 -> {"schema", "schemaType", "references"}
SUBJECTS = {}  # subject -> [id of version 1, id of version 2, ...]


def canonical(body):
    return {
        "schema": body["schema"],
        "schemaType": body.get("schemaType", "AVRO"),
        "references": body.get("references", []),
    }


def find(schema):
    for i, s in enumerate(SCHEMAS):
        if s == schema:
            return i + 1
    return None


def authorized(header):
    basic, bearer = os.environ.get("REGISTRY_BASIC_AUTH"), os.environ.get("REGISTRY_BEARER_TOKEN")
    if basic is None and bearer is None:
        return True
    if basic is not None and header == "Basic " + base64.b64encode(basic.encode()).decode():
        return True
    return bearer is not None and header == "Bearer " + bearer


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def refused(self):
        if authorized(self.headers.get("Authorization")):
            return False
        self.answer(401, {"error_code": 401, "message": "Unauthorized"})
        return True

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def not_found(self, code, message):
        self.answer(404, {"error_code": code, "message": message})

    def schema_body(self, schema_id):
        s = SCHEMAS[schema_id - 1]
        body = {"schema": s["schema"], "references": s["references"]}
        if s["schemaType"] != "AVRO":  # as Confluent's registry answers
            body["schemaType"] = s["schemaType"]
        return body

    def do_GET(self):
        if self.refused():
            return
        parts = [unquote(p) for p in urlparse(self.path).path.strip("/").split("/")]
        with LOCK:
            if parts == ["schemas", "types"]:
                return self.answer(200, ["JSON", "PROTOBUF", "AVRO"])
            if len(parts) == 3 and parts[:2] == ["schemas", "ids"]:
                schema_id = int(parts[2])
                if not 1 <= schema_id <= len(SCHEMAS):
                    return self.not_found(40403, "Schema %d not found" % schema_id)
                return self.answer(200, self.schema_body(schema_id))
            if len(parts) == 4 and parts[0] == "subjects" and parts[2] == "versions":
                versions = SUBJECTS.get(parts[1])
                if versions is None:
                    return self.not_found(40401, "Subject '%s' not found." % parts[1])
                v = len(versions) if parts[3] in ("latest", "-1") else int(parts[3])
                if not 1 <= v <= len(versions):
                    return self.not_found(40402, "Version %s not found." % parts[3])
                body = self.schema_body(versions[v - 1])
                body.update({"subject": parts[1], "version": v, "id": versions[v - 1]})
                body.setdefault("schemaType", "AVRO")
                return self.answer(200, body)
            if parts == ["subjects"]:
                return self.answer(200, sorted(SUBJECTS))
        self.not_found(404, "no such endpoint: " + self.path)

    def do_POST(self):
        if self.refused():
            return
        parts = [unquote(p) for p in urlparse(self.path).path.strip("/").split("/")]
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        schema = canonical(body)
        with LOCK:
            if len(parts) == 3 and parts[0] == "subjects" and parts[2] == "versions":
                schema_id = find(schema)
                if schema_id is None:
                    SCHEMAS.append(schema)
                    schema_id = len(SCHEMAS)
                versions = SUBJECTS.setdefault(parts[1], [])
                if schema_id not in versions:
                    versions.append(schema_id)
                return self.answer(200, {"id": schema_id, "subject": parts[1], "version": versions.index(schema_id) + 1})
            if len(parts) == 2 and parts[0] == "subjects":
                versions = SUBJECTS.get(parts[1], [])
                schema_id = find(schema)
                if schema_id not in versions:
                    return self.not_found(40403, "Schema not found")
                return self.answer(200, {"subject": parts[1], "id": schema_id,
                                         "version": versions.index(schema_id) + 1, **self.schema_body(schema_id)})
        self.not_found(404, "no such endpoint: " + self.path)


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if os.environ.get("REGISTRY_TLS_CERT"):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(os.environ["REGISTRY_TLS_CERT"], os.environ["REGISTRY_TLS_KEY"])
        server.socket = context.wrap_socket(server.socket, server_side=True)
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    server.serve_forever()


if __name__ == "__main__":
    main()
