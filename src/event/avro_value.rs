//! A decoded Avro record (apache-avro's `Value`) as a serde `Deserializer`, so the mapping's one
//! walk reads it directly: no copy into another tree first. Unions read as their value, logical
//! timestamps as their number, enums as their symbol, as Avro's JSON form has them.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use apache_avro::types::Value;
use serde::de::value::{BorrowedStrDeserializer, Error};
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::forward_to_deserialize_any;

/// A borrowed Avro value, deserialized as its JSON form.
pub(super) struct AvroValue<'v>(pub(super) &'v Value);

impl<'de> de::Deserializer<'de> for AvroValue<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_unit(),
            Value::Boolean(b) => visitor.visit_bool(*b),
            Value::Int(i) | Value::Date(i) | Value::TimeMillis(i) => visitor.visit_i64(i64::from(*i)),
            Value::Long(i)
            | Value::TimeMicros(i)
            | Value::TimestampMillis(i)
            | Value::TimestampMicros(i)
            | Value::TimestampNanos(i)
            | Value::LocalTimestampMillis(i)
            | Value::LocalTimestampMicros(i)
            | Value::LocalTimestampNanos(i) => visitor.visit_i64(*i),
            Value::Float(f) => visitor.visit_f64(f64::from(*f)),
            Value::Double(d) => visitor.visit_f64(*d),
            Value::Union(_, inner) => AvroValue(inner).deserialize_any(visitor),
            Value::String(s) | Value::Enum(_, s) => visitor.visit_borrowed_str(s),
            Value::Uuid(u) => visitor.visit_string(u.as_hyphenated().to_string()),
            Value::Record(fields) => {
                visitor.visit_map(Pairs { pairs: fields.iter().map(|(k, v)| (k, v)), value: None })
            }
            Value::Map(entries) => visitor.visit_map(Pairs { pairs: entries.iter(), value: None }),
            Value::Array(items) => visitor.visit_seq(Items(items.iter())),
            Value::Bytes(bytes) | Value::Fixed(_, bytes) => visitor.visit_borrowed_bytes(bytes),
            // Never an id or a timestamp: what a mapping reads there is a type fault.
            Value::Decimal(_) | Value::BigDecimal(_) | Value::Duration(_) => visitor.visit_bytes(&[]),
        }
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
        unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier ignored_any
    }
}

/// A record's fields (in schema order) or a map's entries: names and values.
struct Pairs<'v, I> {
    pairs: I,
    /// The value of the name just handed over.
    value: Option<&'v Value>,
}

impl<'v, I: Iterator<Item = (&'v String, &'v Value)>> MapAccess<'v> for Pairs<'v, I> {
    type Error = Error;
    fn next_key_seed<K: DeserializeSeed<'v>>(&mut self, seed: K) -> Result<Option<K::Value>, Error> {
        let Some((name, value)) = self.pairs.next() else { return Ok(None) };
        self.value = Some(value);
        seed.deserialize(BorrowedStrDeserializer::new(name)).map(Some)
    }
    fn next_value_seed<T: DeserializeSeed<'v>>(&mut self, seed: T) -> Result<T::Value, Error> {
        match self.value.take() {
            Some(value) => seed.deserialize(AvroValue(value)),
            None => Err(de::Error::custom("a value without its key")),
        }
    }
}

/// An array's items.
struct Items<'v>(std::slice::Iter<'v, Value>);

impl<'v> SeqAccess<'v> for Items<'v> {
    type Error = Error;
    fn next_element_seed<T: DeserializeSeed<'v>>(&mut self, seed: T) -> Result<Option<T::Value>, Error> {
        self.0.next().map(|value| seed.deserialize(AvroValue(value))).transpose()
    }
}
