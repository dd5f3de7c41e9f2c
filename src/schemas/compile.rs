//! A schema's text into what decodes messages: an Avro schema (with the named schemas it
//! refers to) or a Protobuf file (compiled by protox, with its imports and Google's well-known
//! types); from the registry or from `[schemas.*]` files.

use std::collections::{BTreeMap, HashSet};

use prost::Message as _;
use prost_reflect::{DescriptorPool, FileDescriptor, MessageDescriptor};

use super::registry::{Answer, RegisteredSchema, Registry};
use super::SchemaError;
use crate::config::LocalSchema;

/// How deep references may nest: a registry's answers are input, and a cycle must end.
const MAX_REFERENCE_DEPTH: usize = 16;

/// A schema, ready to decode with.
#[derive(Debug)]
pub enum Schema {
    Avro {
        /// The writer's schema.
        schema: apache_avro::Schema,
        /// The named schemas it refers to (registry references).
        named: Vec<apache_avro::Schema>,
    },
    /// A registry's Protobuf schema: the message is chosen per message by the wire format's
    /// message indexes.
    ProtobufFile(FileDescriptor),
    /// A local Protobuf message type (bare messages carry no indexes).
    ProtobufMessage(MessageDescriptor),
}

impl Schema {
    /// For the log.
    pub fn describe(&self) -> String {
        match self {
            Schema::Avro { schema, .. } => match schema.name() {
                Some(name) => format!("Avro {}", name.fullname(None)),
                None => "Avro".to_string(),
            },
            Schema::ProtobufFile(file) => {
                let messages: Vec<String> = file.messages().map(|m| m.full_name().to_string()).collect();
                format!("Protobuf {}", messages.join(", "))
            }
            Schema::ProtobufMessage(m) => format!("Protobuf {}", m.full_name()),
        }
    }
}

/// The registry's schema `id`, with its references.
pub(super) fn registered(registry: &Registry, id: u32) -> Result<Schema, SchemaError> {
    let main = match registry.schema_by_id(id)? {
        Answer::Found(schema) => schema,
        Answer::NotFound(why) => return Err(SchemaError::NotFound(why)),
    };
    let mut references = BTreeMap::new();
    collect_references(registry, &main, &mut references, &mut HashSet::new(), 0)?;
    match main.schema_type.as_str() {
        "AVRO" => avro(&main.schema, references.values().map(String::as_str)),
        "PROTOBUF" => protobuf(id, &main.schema, &references),
        other => Err(SchemaError::Invalid(format!(
            "schema {id} is of type {other}; rankpulse reads AVRO and PROTOBUF from the registry (and JSON as kafka.*_format = \"json\")"
        ))),
    }
}

/// Every schema `schema` refers to, directly or not, by the name it is referred to by.
fn collect_references(
    registry: &Registry,
    schema: &RegisteredSchema,
    into: &mut BTreeMap<String, String>,
    seen: &mut HashSet<(String, i64)>,
    depth: usize,
) -> Result<(), SchemaError> {
    if depth > MAX_REFERENCE_DEPTH {
        return Err(SchemaError::Invalid(format!("references nest deeper than {MAX_REFERENCE_DEPTH}")));
    }
    for reference in &schema.references {
        if !seen.insert((reference.subject.clone(), reference.version)) {
            continue;
        }
        let referenced = match registry.subject_version(&reference.subject, reference.version)? {
            Answer::Found(s) => s,
            Answer::NotFound(why) => {
                return Err(SchemaError::NotFound(format!("reference {:?}: {why}", reference.name)));
            }
        };
        collect_references(registry, &referenced, into, seen, depth + 1)?;
        into.insert(reference.name.clone(), referenced.schema);
    }
    Ok(())
}

/// An Avro schema with the named schemas it may refer to.
fn avro<'a>(text: &str, named: impl Iterator<Item = &'a str>) -> Result<Schema, SchemaError> {
    let named: Vec<&str> = named.collect();
    let (schema, named) = apache_avro::Schema::parse_str_with_list(text, named)
        .map_err(|e| SchemaError::Invalid(format!("not an Avro schema: {e}")))?;
    Ok(Schema::Avro { schema, named })
}

/// A Protobuf schema with its imports: `.proto` text, or a base64 `FileDescriptorProto` (as
/// confluent-kafka's serializers register it).
fn protobuf(id: u32, text: &str, imports: &BTreeMap<String, String>) -> Result<Schema, SchemaError> {
    let main_name = format!("rankpulse-registry-schema-{id}.proto");
    let mut files = Files::default();
    files.add(&main_name, text)?;
    for (name, text) in imports {
        files.add(name, text)?;
    }
    let mut resolver = protox::file::ChainFileResolver::new();
    resolver.add(files);
    resolver.add(protox::file::GoogleFileResolver::new());
    let mut compiler = protox::Compiler::with_file_resolver(resolver);
    compiler.open_file(&main_name).map_err(|e| SchemaError::Invalid(format!("Protobuf schema {id}: {e}")))?;
    let pool = compiler.descriptor_pool();
    pool.get_file_by_name(&main_name)
        .map(Schema::ProtobufFile)
        .ok_or_else(|| SchemaError::Invalid(format!("Protobuf schema {id} did not compile to a file")))
}

/// Protobuf sources by file name, for protox.
#[derive(Default)]
struct Files(BTreeMap<String, protox::file::File>);

impl Files {
    fn add(&mut self, name: &str, text: &str) -> Result<(), SchemaError> {
        let file = match descriptor(text) {
            Some(mut proto) => {
                proto.name = Some(name.to_string());
                protox::file::File::from_file_descriptor_proto(proto)
            }
            None => protox::file::File::from_source(name, text)
                .map_err(|e| SchemaError::Invalid(format!("Protobuf file {name}: {e}")))?,
        };
        self.0.insert(name.to_string(), file);
        Ok(())
    }
}

/// A base64 `FileDescriptorProto`, when `text` is one (`.proto` text never is: it has spaces).
fn descriptor(text: &str) -> Option<prost_types::FileDescriptorProto> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD.decode(text.trim()).ok()?;
    prost_types::FileDescriptorProto::decode(bytes.as_slice()).ok()
}

impl protox::file::FileResolver for Files {
    fn open_file(&self, name: &str) -> Result<protox::file::File, protox::Error> {
        self.0.get(name).cloned().ok_or_else(|| protox::Error::file_not_found(name))
    }
}

/// A `[schemas.*]` entry.
pub(super) fn local(local: &LocalSchema) -> Result<Schema, SchemaError> {
    if !local.avro_file.is_empty() {
        let text = std::fs::read_to_string(&local.avro_file)
            .map_err(|e| SchemaError::Setup(format!("reading {}: {e}", local.avro_file)))?;
        return avro(&text, std::iter::empty()).map_err(|e| SchemaError::Setup(format!("{}: {e}", local.avro_file)));
    }
    let bytes = std::fs::read(&local.protobuf_descriptor_set)
        .map_err(|e| SchemaError::Setup(format!("reading {}: {e}", local.protobuf_descriptor_set)))?;
    let pool = DescriptorPool::decode(bytes.as_slice()).map_err(|e| {
        SchemaError::Setup(format!("{} is not a FileDescriptorSet: {e}", local.protobuf_descriptor_set))
    })?;
    pool.get_message_by_name(&local.protobuf_message).map(Schema::ProtobufMessage).ok_or_else(|| {
        SchemaError::Setup(format!(
            "{} has no message {:?} (fully qualified: package.Message)",
            local.protobuf_descriptor_set, local.protobuf_message
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protobuf_text_and_descriptors_compile_with_their_imports() {
        let common = "syntax = \"proto3\";\npackage acme;\nmessage Hit { string id = 1; }\n";
        let main = "syntax = \"proto3\";\npackage acme;\nimport \"common.proto\";\nimport \"google/protobuf/timestamp.proto\";\n\
                    message Search { string query_id = 1; repeated Hit hits = 2; google.protobuf.Timestamp at = 3; }\n";
        let imports = BTreeMap::from([("common.proto".to_string(), common.to_string())]);
        let Schema::ProtobufFile(file) = protobuf(7, main, &imports).unwrap() else { panic!() };
        assert_eq!(file.messages().map(|m| m.full_name().to_string()).collect::<Vec<_>>(), ["acme.Search"]);
        // The same file as a base64 descriptor, as confluent-kafka registers it.
        use base64::Engine as _;
        let proto = file.file_descriptor_proto().encode_to_vec();
        let b64 = base64::engine::general_purpose::STANDARD.encode(proto);
        let Schema::ProtobufFile(again) = protobuf(8, &b64, &imports).unwrap() else { panic!() };
        assert_eq!(again.messages().count(), 1);
        let err = protobuf(9, "syntax = \"proto3\"; message X { Missing m = 1; }", &BTreeMap::new()).unwrap_err();
        assert!(err.to_string().contains("Missing"), "{err}");
    }

    #[test]
    fn avro_schemas_resolve_named_references() {
        let hit = r#"{"type":"record","name":"Hit","namespace":"acme","fields":[{"name":"id","type":"string"}]}"#;
        let main = r#"{"type":"record","name":"Search","namespace":"acme","fields":[{"name":"hits","type":{"type":"array","items":"acme.Hit"}}]}"#;
        let Schema::Avro { named, .. } = avro(main, [hit].into_iter()).unwrap() else { panic!() };
        assert_eq!(named.len(), 1);
        assert!(avro(main, std::iter::empty()).is_err(), "an unresolved name");
        assert!(avro("{not json", std::iter::empty()).is_err());
    }
}
