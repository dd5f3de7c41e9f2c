//! Avro and Protobuf messages into a record the mapping walks: Avro's decoded value as it is
//! (read in its JSON form, `avro_value.rs`), Protobuf's canonical JSON mapping with the fields'
//! declared names.
//!
//! With a registry, a message is in Confluent's wire format: a zero byte, the schema id (4
//! bytes, big-endian), for Protobuf the message indexes (a zigzag varint count, then each
//! index; a single 0 byte for the file's first message), then the encoded record. With a local
//! schema it is the bare encoding. Decoding is the crates' (apache-avro, prost-reflect), never
//! our own; what is ours is the framing, which is bounds-checked here.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use prost_reflect::{DynamicMessage, MessageDescriptor, SerializeOptions};

use super::mapped::Body;
use super::{RejectReason, Rejection};
use crate::schemas::{Input, Schema, SchemaError, Schemas};

/// Confluent's magic byte.
const MAGIC: u8 = 0;
/// More message indexes than this is not a schema anyone writes: a corrupt header.
const MAX_INDEXES: u64 = 64;

fn undecodable(detail: impl Into<String>) -> Rejection {
    Rejection::new(RejectReason::Undecodable, detail)
}

impl From<SchemaError> for Rejection {
    fn from(e: SchemaError) -> Self {
        let reason = match e {
            SchemaError::Unreachable(_) => RejectReason::SchemaUnavailable,
            SchemaError::Setup(_) | SchemaError::NotFound(_) | SchemaError::Invalid(_) => RejectReason::UnknownSchema,
        };
        Rejection::new(reason, e.to_string())
    }
}

/// Decodes one Avro or Protobuf message of `input` into the record a mapping walks.
pub(super) fn decode<'a>(schemas: &Schemas, input: Input, payload: &[u8]) -> Result<Body<'a>, Rejection> {
    if payload.is_empty() {
        return Err(Rejection::new(RejectReason::EmptyMessage, "empty payload"));
    }
    if schemas.has_local(input) {
        let schema = schemas.local(input)?;
        return match &*schema {
            Schema::Avro { schema, named } => avro(schema, named, payload),
            Schema::ProtobufMessage(message) => protobuf(message.clone(), payload),
            Schema::ProtobufFile(_) => Err(undecodable("a local Protobuf schema names its message")),
        };
    }
    let (id, body) = framed(payload)?;
    let schema = schemas.by_id(id)?;
    match &*schema {
        Schema::Avro { schema, named } => avro(schema, named, body),
        Schema::ProtobufFile(file) => {
            let (indexes, body) = message_indexes(body)?;
            let message = message_at(file, &indexes)
                .ok_or_else(|| undecodable(format!("schema {id} has no message at indexes {indexes:?}")))?;
            protobuf(message, body)
        }
        Schema::ProtobufMessage(message) => protobuf(message.clone(), body),
    }
}

/// The schema id and the rest, from Confluent's header.
fn framed(payload: &[u8]) -> Result<(u32, &[u8]), Rejection> {
    match payload.split_first() {
        Some((&MAGIC, rest)) => match rest.split_first_chunk::<4>() {
            Some((id, body)) => Ok((u32::from_be_bytes(*id), body)),
            None => Err(undecodable(format!("{} bytes: shorter than Confluent's 5-byte header", payload.len()))),
        },
        Some((other, _)) => Err(undecodable(format!(
            "first byte {other:#04x}, not Confluent's magic byte 0 (a message written without a schema registry's serializer?)"
        ))),
        None => Err(Rejection::new(RejectReason::EmptyMessage, "empty payload")),
    }
}

/// Protobuf's message indexes and the rest.
fn message_indexes(mut body: &[u8]) -> Result<(Vec<usize>, &[u8]), Rejection> {
    let count = zigzag(varint(&mut body)?);
    if count == 0 {
        return Ok((vec![0], body));
    }
    if !(0..=MAX_INDEXES as i64).contains(&count) {
        return Err(undecodable(format!("{count} message indexes")));
    }
    let mut indexes = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let index = zigzag(varint(&mut body)?);
        indexes.push(usize::try_from(index).map_err(|_| undecodable(format!("message index {index}")))?);
    }
    Ok((indexes, body))
}

fn varint(body: &mut &[u8]) -> Result<u64, Rejection> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let Some((&byte, rest)) = body.split_first() else {
            return Err(undecodable("truncated in the message indexes"));
        };
        *body = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(undecodable("a message index longer than a varint"))
}

fn zigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// The message a list of indexes names: the file's n-th message, then nested ones.
fn message_at(file: &prost_reflect::FileDescriptor, indexes: &[usize]) -> Option<MessageDescriptor> {
    let (&first, nested) = indexes.split_first()?;
    let mut message = file.messages().nth(first)?;
    for &i in nested {
        let child = message.child_messages().nth(i)?;
        message = child;
    }
    Some(message)
}

fn avro<'a>(schema: &apache_avro::Schema, named: &[apache_avro::Schema], body: &[u8]) -> Result<Body<'a>, Rejection> {
    let mut rest = body;
    let reader = apache_avro::reader::datum::GenericDatumReader::builder(schema)
        .writer_schemata(named.iter().collect())
        .and_then(|b| b.build())
        .map_err(|e| Rejection::new(RejectReason::UnknownSchema, format!("Avro schema: {e}")))?;
    let value =
        reader.read_value(&mut rest).map_err(|e| undecodable(format!("not an Avro record of its schema: {e}")))?;
    if !rest.is_empty() {
        return Err(undecodable(format!("{} bytes after the Avro record", rest.len())));
    }
    Ok(Body::Avro(value))
}

fn protobuf<'a>(message: MessageDescriptor, body: &[u8]) -> Result<Body<'a>, Rejection> {
    let name = message.full_name().to_string();
    let decoded =
        DynamicMessage::decode(message, body).map_err(|e| undecodable(format!("not a Protobuf {name}: {e}")))?;
    // The fields' declared names (not lowerCamelCase), 64-bit integers as numbers.
    let options = SerializeOptions::new().use_proto_field_name(true).stringify_64_bit_integers(false);
    decoded
        .serialize_with_options(serde_json::value::Serializer, &options)
        .map(Body::Tree)
        .map_err(|e| undecodable(format!("a Protobuf {name} without a JSON form: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confluent_framing_is_checked() {
        assert_eq!(framed(&[0, 0, 0, 1, 2, 9]).unwrap(), (258, &[9][..]));
        assert_eq!(framed(&[0, 0, 0]).unwrap_err().reason, RejectReason::Undecodable);
        let wrong = framed(b"{\"json\":1}").unwrap_err();
        assert!(wrong.detail.contains("0x7b"), "{}", wrong.detail);
    }

    #[test]
    fn message_indexes_follow_confluent() {
        assert_eq!(message_indexes(&[0, 7]).unwrap(), (vec![0], &[7][..]), "0 is the first message");
        // Count 2 (zigzag 4), indexes 1 (2) and 0 (0).
        assert_eq!(message_indexes(&[4, 2, 0, 7]).unwrap(), (vec![1, 0], &[7][..]));
        assert!(message_indexes(&[4, 2]).is_err(), "truncated");
        assert!(message_indexes(&[0xff; 12]).is_err(), "an endless varint");
        assert!(message_indexes(&[3]).is_err(), "a negative count");
    }
}
