//! The configuration reference of the manual (docs/src/reference/configuration.md) is generated
//! from the schema itself: every section and key from the structs of src/config/ (parsed with
//! syn), what each means from its doc comment, its default from `Config::default()`, its values
//! from the enum's variants and their doc comments. The test fails when the committed page
//! differs from what the schema generates, so the reference cannot drift from the code;
//! `RANKPULSE_BLESS=1 cargo test --test integration config_reference::` rewrites it. It also fails when a key
//! has no doc comment.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use rankpulse::config::Config;
use syn::{Attribute, Expr, Fields, GenericArgument, Item, Lit, Meta, PathArguments, Type};

const PAGE: &str = "docs/src/reference/configuration.md";
/// The files holding the schema's structs and enums (`metrics.trec_eval`'s enum is the metrics'
/// own).
const SCHEMA_FILES: &[&str] = &[
    "src/config/schema.rs",
    "src/config/ab.rs",
    "src/config/inputs.rs",
    "src/config/repartition.rs",
    "src/config/clicks.rs",
    "src/config/readout.rs",
    "src/config/page.rs",
    "src/config/http.rs",
    "src/stats/multiple.rs",
    "src/metrics/mod.rs",
];

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// A struct of the schema: its doc and its fields (name, doc, type).
struct Section {
    doc: String,
    fields: Vec<(String, String, Type)>,
}

/// An enum of the schema: its doc and its variants as written in TOML, with their docs.
struct Choice {
    doc: String,
    values: Vec<(String, String)>,
}

#[derive(Default)]
struct Schema {
    sections: BTreeMap<String, Section>,
    choices: BTreeMap<String, Choice>,
}

/// The doc comment, its lines joined into paragraphs, rustdoc's intra-doc links made code.
fn doc(attrs: &[Attribute]) -> String {
    let lines: Vec<String> = attrs
        .iter()
        .filter_map(|a| match &a.meta {
            Meta::NameValue(nv) if nv.path.is_ident("doc") => match &nv.value {
                Expr::Lit(lit) => match &lit.lit {
                    Lit::Str(s) => Some(s.value().strip_prefix(' ').unwrap_or(&s.value()).to_string()),
                    _ => None,
                },
                _ => None,
            },
            _ => None,
        })
        .collect();
    let mut text = String::new();
    for line in lines {
        if line.trim().is_empty() {
            text.push_str("\n\n");
        } else {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push(' ');
            }
            text.push_str(line.trim_end());
        }
    }
    text.replace("[`", "`").replace("`]", "`").trim().to_string()
}

/// The value of `#[serde(<name> = "...")]`: `rename_all` of an enum, `rename` of a variant.
fn serde_attr(attrs: &[Attribute], name: &str) -> Option<String> {
    let mut rule = None;
    for attr in attrs.iter().filter(|a| a.path().is_ident("serde")) {
        let _ = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident(name) {
                let value: syn::LitStr = meta.value()?.parse()?;
                rule = Some(value.value());
            } else if meta.input.peek(syn::Token![=]) {
                let _: Expr = meta.value()?.parse()?;
            }
            Ok(())
        });
    }
    rule
}

/// A variant's name as serde writes it under `rule`.
fn renamed(variant: &str, rule: Option<&str>) -> String {
    let snake = || {
        let mut out = String::new();
        for (i, c) in variant.chars().enumerate() {
            if c.is_uppercase() && i > 0 {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        }
        out
    };
    match rule {
        Some("lowercase") => variant.to_lowercase(),
        Some("snake_case") => snake(),
        Some("kebab-case") => snake().replace('_', "-"),
        _ => variant.to_string(),
    }
}

fn parse_schema() -> Schema {
    let mut schema = Schema::default();
    for file in SCHEMA_FILES {
        let text = std::fs::read_to_string(repo(file)).unwrap();
        let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        for item in ast.items {
            match item {
                Item::Struct(s) => {
                    let Fields::Named(named) = s.fields else { continue };
                    let fields = named
                        .named
                        .iter()
                        .filter(|f| matches!(f.vis, syn::Visibility::Public(_)))
                        .map(|f| {
                            let name =
                                serde_attr(&f.attrs, "rename").unwrap_or_else(|| f.ident.as_ref().unwrap().to_string());
                            (name, doc(&f.attrs), f.ty.clone())
                        })
                        .collect();
                    schema.sections.insert(s.ident.to_string(), Section { doc: doc(&s.attrs), fields });
                }
                Item::Enum(e) => {
                    let rule = serde_attr(&e.attrs, "rename_all");
                    let values = e
                        .variants
                        .iter()
                        .map(|v| {
                            let name = serde_attr(&v.attrs, "rename")
                                .unwrap_or_else(|| renamed(&v.ident.to_string(), rule.as_deref()));
                            (name, doc(&v.attrs))
                        })
                        .collect();
                    schema.choices.insert(e.ident.to_string(), Choice { doc: doc(&e.attrs), values });
                }
                _ => {}
            }
        }
    }
    schema
}

/// A type as the user writes it: its description, and the schema struct or enum it names.
fn describe(ty: &Type, schema: &Schema) -> (String, Option<String>) {
    let Type::Path(path) = ty else { return ("value".into(), None) };
    let last = path.path.segments.last().unwrap();
    let name = last.ident.to_string();
    let args: Vec<&Type> = match &last.arguments {
        PathArguments::AngleBracketed(a) => a
            .args
            .iter()
            .filter_map(|g| match g {
                GenericArgument::Type(t) => Some(t),
                _ => None,
            })
            .collect(),
        _ => vec![],
    };
    match name.as_str() {
        "String" | "PathBuf" => ("string".into(), None),
        "bool" => ("boolean".into(), None),
        "u8" | "u16" | "u32" | "u64" | "usize" | "i32" | "i64" => ("integer".into(), None),
        "f64" => ("number".into(), None),
        "HumanDuration" => ("duration (`250ms`, `10s`, `30m`, `1h`, `1d`)".into(), None),
        "FieldSource" => (
            "field source: a path (`/a/b`, `$.a.b`), or a table of one of `path`, `header`, `key = true`, \
             `value`, with an optional `default` (and `format` for a timestamp); see \
             [Your events as they are](../mappings.md)"
                .into(),
            None,
        ),
        "Option" => describe(args[0], schema),
        "Vec" => {
            let (inner, named) = describe(args[0], schema);
            (format!("list of {inner}"), named)
        }
        "BTreeMap" | "HashMap" => {
            let (inner, named) = describe(args[1], schema);
            (format!("table of {inner}"), named)
        }
        other if schema.choices.contains_key(other) => {
            let values: Vec<String> = schema.choices[other].values.iter().map(|(v, _)| format!("`\"{v}\"`")).collect();
            (format!("one of {}", values.join(", ")), Some(other.to_string()))
        }
        other if schema.sections.contains_key(other) => ("table".into(), Some(other.to_string())),
        other => panic!("the reference does not know how to describe the type `{other}`; teach describe()"),
    }
}

/// The default of `key` (a dotted path) in the built-in configuration, as TOML writes it.
fn default_of(defaults: &toml::Value, key: &str) -> Option<String> {
    let mut value = defaults;
    for part in key.split('.') {
        value = value.get(part)?;
    }
    Some(match value {
        toml::Value::Table(t) if t.is_empty() => "empty".into(),
        toml::Value::Array(a) if a.is_empty() => "empty".into(),
        other => format!("`{other}`"),
    })
}

fn generate() -> String {
    let schema = parse_schema();
    let defaults = toml::Value::try_from(Config::default()).unwrap();
    let mut page = String::new();
    page.push_str("# Configuration reference\n\n");
    page.push_str(
        "<!-- Generated by tests/config_reference.rs from the doc comments of src/config/ and \
         `Config::default()`; do not edit: `RANKPULSE_BLESS=1 cargo test --test integration config_reference::` \
         rewrites it. -->\n\n",
    );
    page.push_str(
        "Every section and key of the configuration file, with its type, its default and its \
         environment override. Every key is optional: an empty file is a valid configuration, and \
         a key that is not listed here is refused. How files, environment overrides and \
         `rankpulse check-config` work is in [Configuration](../configuration.md).\n\n",
    );
    let root = &schema.sections["Config"];
    // Depth first: a table of tables is documented right after its parent section, so that
    // `[mapping.impressions]` is read beside `[mapping]`, not after every other section.
    let mut queue: VecDeque<(String, String, bool)> = root
        .fields
        .iter()
        .map(|(name, _, ty)| {
            let (_, named) = describe(ty, &schema);
            (name.clone(), named.expect("every top-level key is a section"), true)
        })
        .collect();
    let mut undocumented = Vec::new();
    while let Some((table, struct_name, env)) = queue.pop_front() {
        let section = &schema.sections[&struct_name];
        let mut children = Vec::new();
        writeln!(page, "## `[{table}]`\n").unwrap();
        if !section.doc.is_empty() {
            writeln!(page, "{}\n", section.doc).unwrap();
        }
        for (name, field_doc, ty) in &section.fields {
            let key = format!("{table}.{name}");
            let (kind, named) = describe(ty, &schema);
            if let Some(child) = named.as_ref().filter(|n| schema.sections.contains_key(*n)) {
                let is_map = matches!(ty, Type::Path(p) if p.path.segments.last().unwrap().ident == "BTreeMap");
                let child_table = if is_map { format!("{key}.<name>") } else { key.clone() };
                // A table of tables: documented as a section of its own, after this one.
                children.push((child_table.clone(), child.clone(), false));
                writeln!(page, "### `{key}`\n\n{field_doc}\n\nA table: see `[{child_table}]` below.\n").unwrap();
                continue;
            }
            if field_doc.is_empty() {
                undocumented.push(key.clone());
            }
            writeln!(page, "### `{key}`\n\n{field_doc}\n").unwrap();
            let mut facts = vec![format!("Type: {kind}")];
            if let Some(default) = default_of(&defaults, &key) {
                facts.push(format!("Default: {default}"));
            }
            if env && !kind.starts_with("table") {
                facts.push(format!("Environment: `RANKPULSE__{}`", key.replace('.', "__").to_uppercase()));
            }
            writeln!(page, "{}\n", facts.join(" · ")).unwrap();
            if let Some(choice) = named.as_ref().and_then(|n| schema.choices.get(n)) {
                for (value, value_doc) in &choice.values {
                    writeln!(page, "- `\"{value}\"`: {value_doc}").unwrap();
                }
                page.push('\n');
                let _ = &choice.doc;
            }
        }
        for child in children.into_iter().rev() {
            queue.push_front(child);
        }
    }
    assert!(undocumented.is_empty(), "keys without a doc comment: {undocumented:?}");
    page.trim_end().to_string() + "\n"
}

#[test]
fn the_reference_is_what_the_schema_generates() {
    let generated = generate();
    let path = repo(PAGE);
    if std::env::var_os("RANKPULSE_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != generated {
        let line = committed.lines().zip(generated.lines()).position(|(a, b)| a != b).map_or(0, |n| n + 1);
        panic!(
            "{PAGE} differs from what the schema generates (first at line {line}); run \
             `RANKPULSE_BLESS=1 cargo test --test integration config_reference::` and commit the page"
        );
    }
}

/// Every key of the built-in configuration, dotted (`kafka.brokers`, `clicks.clip`).
fn default_keys() -> Vec<String> {
    fn keys(prefix: &str, value: &toml::Value, out: &mut Vec<String>) {
        if let toml::Value::Table(t) = value {
            for (k, v) in t {
                let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                // Tables whose keys are the user's own (properties, gains, users) end here.
                if v.as_table().is_some_and(|t| !t.is_empty())
                    && !prefix.is_empty()
                    && !["metrics.action_gains"].contains(&key.as_str())
                {
                    keys(&key, v, out);
                } else if !prefix.is_empty() {
                    out.push(key);
                } else {
                    keys(&key, v, out);
                }
            }
        }
    }
    let mut all = Vec::new();
    keys("", &toml::Value::try_from(Config::default()).unwrap(), &mut all);
    assert!(all.len() > 40, "{all:?}");
    all
}

/// The keys `config/rankpulse.toml` lists, set or shown commented out (`# key = value` under
/// its section, or a `# [table]` of its own), each with its section: `ab.correction`.
fn shipped_keys(text: &str) -> Vec<String> {
    let mut section = String::new();
    let mut listed = Vec::new();
    for line in text.lines() {
        let header = line.trim_start_matches('#').trim();
        if let Some(name) = header.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            if name.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)) {
                listed.push(name.to_string());
                // A deeper-indented header is an example in prose (`#   [ab.experiments.x]`).
                if line.starts_with('[') || line.starts_with("# [") {
                    section = name.to_string();
                }
                continue;
            }
        }
        // A key, set or commented out with one `# ` (deeper indents are examples in prose).
        let key_line = line.strip_prefix("# ").unwrap_or(line);
        if let Some((key, _)) = key_line.split_once(" = ") {
            if !key.is_empty() && key.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                listed.push(format!("{section}.{key}"));
            }
        }
    }
    listed
}

/// `config/rankpulse.toml` says it lists every key with its default: it does, so a section
/// added to `Config` without its lines in the shipped file fails here. (That the keys it sets
/// are the defaults is `config::load`'s test `shipped_default_file_equals_built_in_defaults`.)
#[test]
fn the_shipped_file_lists_every_key() {
    let text = std::fs::read_to_string(repo("config/rankpulse.toml")).unwrap();
    assert!(text.starts_with("# rankpulse configuration: every key with its default"));
    let listed = shipped_keys(&text);
    let missing: Vec<String> = default_keys()
        .into_iter()
        .filter(|key| !listed.iter().any(|l| l == key || l.starts_with(&format!("{key}."))))
        .collect();
    assert!(missing.is_empty(), "keys missing from config/rankpulse.toml: {missing:?}");
    // Every section of the schema is there, if only in a comment when all its keys are optional.
    for (name, _, _) in &parse_schema().sections["Config"].fields {
        assert!(
            text.contains(&format!("[{name}]")) || text.contains(&format!("[{name}.")),
            "config/rankpulse.toml does not mention [{name}]"
        );
    }
}

/// The configuration chapter's list of sections names every section, each linked to its
/// reference.
#[test]
fn the_configuration_chapter_lists_every_section() {
    let chapter = std::fs::read_to_string(repo("docs/src/configuration.md")).unwrap();
    let list = &chapter[chapter.find("## The sections").unwrap()..];
    let list = &list[..list[3..].find("\n## ").map_or(list.len(), |n| n + 3)];
    for (name, _, _) in &parse_schema().sections["Config"].fields {
        let item = format!("- [`[{name}]`](reference/configuration.md#{name})");
        assert!(list.contains(&item), "docs/src/configuration.md's section list has no {item}");
    }
}

/// The reference speaks the file's language: no Rust type (a schema struct or enum's name, a
/// `Type::method` path, `Debug`) where a user looks for a TOML key or section.
#[test]
fn the_reference_names_no_rust_types() {
    let schema = parse_schema();
    // The committed page, which the_reference_is_what_the_schema_generates keeps generated.
    let generated = std::fs::read_to_string(repo(PAGE)).unwrap();
    // The generator's own note to maintainers is an HTML comment, not shown.
    let shown = generated.split_once("-->").map_or(generated.as_str(), |(_, rest)| rest);
    let rust: Vec<&str> = shown
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|quoted| {
            quoted.contains("::")
                || *quoted == "Debug"
                || schema.sections.contains_key(*quoted)
                || schema.choices.contains_key(*quoted)
        })
        .collect();
    assert!(rust.is_empty(), "Rust names in the configuration reference: {rust:?}");
    for forbidden in ["FieldSource", "ImpressionMapping", "TlsServerConfig", "KafkaConfig"] {
        assert!(!shown.contains(forbidden), "{forbidden} in the configuration reference");
    }
}

/// A table of tables follows its parent: each `[a.b]` section comes after `[a]` with only other
/// `[a.*]` sections between them.
#[test]
fn nested_tables_are_documented_beside_their_parent() {
    let generated = std::fs::read_to_string(repo(PAGE)).unwrap();
    let sections: Vec<&str> =
        generated.lines().filter_map(|l| l.strip_prefix("## `[").and_then(|l| l.strip_suffix("]`"))).collect();
    assert!(sections.len() > 20, "{sections:?}");
    for (i, section) in sections.iter().enumerate() {
        let Some((parent, _)) = section.trim_end_matches(".<name>").rsplit_once('.') else { continue };
        let at = sections.iter().position(|s| *s == parent).unwrap_or_else(|| panic!("no [{parent}]"));
        let between = &sections[at + 1..i];
        assert!(
            at < i && between.iter().all(|s| s.starts_with(&format!("{parent}."))),
            "[{section}] is not beside [{parent}]: {sections:?}"
        );
    }
}

/// Every key of the built-in configuration is in the reference, so a section added to
/// `Config` without a struct the generator can read would fail here.
#[test]
fn every_default_key_is_documented() {
    let generated = generate();
    let all = default_keys();
    let missing: Vec<&String> = all.iter().filter(|k| !generated.contains(&format!("### `{k}`"))).collect();
    assert!(missing.is_empty(), "keys of Config::default() missing from the reference: {missing:?}");
}
