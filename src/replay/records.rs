//! Avro inputs for replay: an exported object container file (`.avro`, what Kafka Connect's
//! S3 and GCS sinks and Spark write) becomes JSON lines of its records' JSON form, the form a
//! mapping walks on Avro messages online, so the same `[mapping.*]` applies offline and online.

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use super::ReplayError;
use crate::config::{Config, InputFormat};
use crate::event::mapped::{native_engagement_mapping, native_impression_mapping_with};
use crate::event::EventKind;

/// JSON-lines files written for the replay, removed when dropped.
#[derive(Debug, Default)]
pub struct Converted {
    /// The temporary files.
    paths: Vec<PathBuf>,
}

impl Drop for Converted {
    fn drop(&mut self) {
        for path in &self.paths {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The files replay reads, and the configuration it reads them with: an Avro input's container
/// file is converted to JSON lines, and its input read as JSON through its mapping (the
/// contract's field names by default, as online). A Protobuf input is refused with what to do.
pub fn prepare(
    cfg: &mut Config,
    impressions: &Path,
    engagements: &Path,
) -> Result<(PathBuf, PathBuf, Converted), ReplayError> {
    let mut converted = Converted::default();
    let impressions = converted.as_lines(cfg, EventKind::Impression, impressions)?;
    let engagements = converted.as_lines(cfg, EventKind::Engagement, engagements)?;
    Ok((impressions, engagements, converted))
}

impl Converted {
    /// The file of one input as lines replay reads, converting it if it is an Avro container
    /// file, and the configuration changed to read it (see [`prepare`]).
    pub fn as_lines(&mut self, cfg: &mut Config, kind: EventKind, path: &Path) -> Result<PathBuf, ReplayError> {
        let name = if kind == EventKind::Impression { "impressions" } else { "engagements" };
        let format =
            if kind == EventKind::Impression { cfg.kafka.impressions_format } else { cfg.kafka.engagements_format };
        match format {
            InputFormat::Json | InputFormat::Ubi => Ok(path.to_path_buf()),
            InputFormat::Protobuf => Err(ReplayError::Records {
                path: path.to_path_buf(),
                message: format!(
                    "kafka.{name}_format is protobuf: replay reads Protobuf exports as JSON lines in Protobuf's JSON form with the fields' declared names (protojson with UseProtoNames, or MessageToJson(preserving_proto_field_name=True)); set kafka.{name}_format = \"json\" for the replay and keep [mapping.{name}]"
                ),
            }),
            InputFormat::Avro => {
                let lines = std::env::temp_dir().join(format!("rankpulse-{}-{name}.jsonl", std::process::id()));
                self.paths.push(lines.clone());
                container_to_json_lines(path, &lines)?;
                if kind == EventKind::Impression {
                    cfg.kafka.impressions_format = InputFormat::Json;
                    let native = native_impression_mapping_with(&cfg.ab.dimensions);
                    cfg.mapping.impressions.get_or_insert(native);
                } else {
                    cfg.kafka.engagements_format = InputFormat::Json;
                    cfg.mapping.engagements.get_or_insert_with(native_engagement_mapping);
                }
                // The records name their schema: none is needed from a registry or a file.
                cfg.schemas = Default::default();
                Ok(lines)
            }
        }
    }
}

/// Writes each record of an Avro object container file as a JSON line.
pub fn container_to_json_lines(container: &Path, lines: &Path) -> Result<u64, ReplayError> {
    let records = |message: String| ReplayError::Records { path: container.to_path_buf(), message };
    let file = File::open(container).map_err(|error| ReplayError::Io { path: container.to_path_buf(), error })?;
    let reader = apache_avro::Reader::new(BufReader::new(file))
        .map_err(|e| records(format!("not an Avro object container file: {e}")))?;
    let out = File::create(lines).map_err(|error| ReplayError::Write { path: lines.to_path_buf(), error })?;
    let mut out = BufWriter::new(out);
    let mut count = 0u64;
    for value in reader {
        let value = value.map_err(|e| records(format!("record {}: {e}", count + 1)))?;
        let json = serde_json::Value::try_from(value).map_err(|e| records(format!("record {}: {e}", count + 1)))?;
        let write = |out: &mut BufWriter<File>| -> std::io::Result<()> {
            serde_json::to_writer(&mut *out, &json)?;
            out.write_all(b"\n")
        };
        write(&mut out).map_err(|error| ReplayError::Write { path: lines.to_path_buf(), error })?;
        count += 1;
    }
    out.flush().map_err(|error| ReplayError::Write { path: lines.to_path_buf(), error })?;
    Ok(count)
}
