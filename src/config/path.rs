//! Where a field lives in a user's event: the path syntax of `[mapping.*]`, parsed once at
//! load so that a typo is a configuration error naming its key, not a rejection per message.
//!
//! Two standard syntaxes, told apart by their first character:
//!
//! * **JSON Pointer** (RFC 6901), starting with `/`: `/hits/hits/*/_id`. Each token names an
//!   object member, or an array element when it is a decimal index (RFC 6901, section 4:
//!   the token is read against the value found); `~0` and `~1` escape `~` and `/`. One
//!   extension: the token `*` selects every element of an array (or every member of an object),
//!   for lists given as an array of objects.
//! * **JSONPath** (RFC 9535), starting with `$`, for what a pointer cannot say: the subset of
//!   member names (`.name`, `['name']`), indexes (`[0]`), wildcards (`[*]`, `.*`) and one
//!   filter form, `[?@.key == 'value']` (a member path compared with a string or number), which
//!   GA4-style `event_params` lists of `{key, value}` objects need:
//!   `$.event_params[?@.key == 'search_term'].value.string_value`.
//!
//! Both parse into the same [`Step`]s; what the steps select is the decoder's business
//! (`crate::event`), on JSON and on decoded Avro and Protobuf records alike.

use std::fmt;

/// One step of a [`FieldPath`].
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// An object member; on an array, the element at this index when the name is a decimal
    /// number (JSON Pointer's rule).
    Key(String),
    /// Every element of an array (every member's value of an object).
    Each,
    /// The elements of an array for which `member` (a path of member names from the element)
    /// equals `equals`.
    Filter { member: Vec<String>, equals: Literal },
}

/// What a filter compares with.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    Text(String),
    Number(f64),
}

/// A parsed path, with the text it was written as (for messages and for writing the
/// configuration back).
#[derive(Debug, Clone, PartialEq)]
pub struct FieldPath {
    /// As written in the configuration.
    pub text: String,
    /// The parsed steps, from the message's root.
    pub steps: Vec<Step>,
}

impl FieldPath {
    /// Whether the path can select more than one value (a wildcard or a filter in it).
    pub fn selects_many(&self) -> bool {
        self.steps.iter().any(|s| !matches!(s, Step::Key(_)))
    }
    /// How many wildcards (not filters) it has.
    pub fn wildcards(&self) -> usize {
        self.steps.iter().filter(|s| matches!(s, Step::Each)).count()
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Parses a JSON Pointer (`/...`) or a JSONPath (`$...`); the error says what is wrong where.
pub fn parse(text: &str) -> Result<FieldPath, String> {
    let steps = if text.starts_with('/') {
        pointer(text)?
    } else if let Some(rest) = text.strip_prefix('$') {
        json_path(rest)?
    } else if text.is_empty() {
        return Err("an empty path (use \"/name\", a JSON Pointer, or \"$.name\", a JSONPath)".into());
    } else {
        return Err(format!(
            "{text:?} is neither a JSON Pointer (starting with `/`: \"/{text}\") nor a JSONPath (starting with `$`: \"$.{text}\")"
        ));
    };
    if steps.is_empty() {
        return Err(format!("{text:?} selects the whole message, not a field of it"));
    }
    Ok(FieldPath { text: text.to_string(), steps })
}

/// RFC 6901, with `*` for every element.
fn pointer(text: &str) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    for token in text.split('/').skip(1) {
        if token == "*" {
            steps.push(Step::Each);
            continue;
        }
        let mut name = String::with_capacity(token.len());
        let mut chars = token.chars();
        while let Some(c) = chars.next() {
            if c != '~' {
                name.push(c);
                continue;
            }
            match chars.next() {
                Some('0') => name.push('~'),
                Some('1') => name.push('/'),
                other => {
                    return Err(format!(
                        "in {text:?}: `~` must be followed by 0 or 1 (RFC 6901), found {}",
                        other.map_or("the end".to_string(), |c| format!("{c:?}"))
                    ))
                }
            }
        }
        steps.push(Step::Key(name));
    }
    Ok(steps)
}

/// The RFC 9535 subset described in the module documentation; `rest` follows the `$`.
fn json_path(rest: &str) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    let mut s = rest;
    let bad = |what: &str, at: &str| format!("in \"${rest}\": {what} at {:?}", at.chars().take(20).collect::<String>());
    while !s.is_empty() {
        if let Some(after) = s.strip_prefix(".*") {
            steps.push(Step::Each);
            s = after;
        } else if let Some(after) = s.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let (name, tail) = after.split_at(end);
            if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-' || c == '@') {
                return Err(bad("expected a member name (use ['...'] for other characters)", after));
            }
            steps.push(Step::Key(name.to_string()));
            s = tail;
        } else if let Some(after) = s.strip_prefix('[') {
            let close = closing_bracket(after).ok_or_else(|| bad("an unclosed `[`", s))?;
            let (inside, tail) = after.split_at(close);
            steps.push(bracket(inside.trim()).map_err(|e| bad(&e, s))?);
            s = tail.get(1..).unwrap_or("");
        } else {
            return Err(bad("expected `.` or `[`", s));
        }
    }
    Ok(steps)
}

/// The index of the `]` closing a bracket, skipping quoted text.
fn closing_bracket(s: &str) -> Option<usize> {
    let mut quote = None;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                }
            }
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c == ']' => return Some(i),
            None => {}
        }
    }
    None
}

/// What is inside one `[...]`.
fn bracket(inside: &str) -> Result<Step, String> {
    if inside == "*" {
        return Ok(Step::Each);
    }
    if let Some(text) = quoted(inside)? {
        return Ok(Step::Key(text));
    }
    if let Some(filter) = inside.strip_prefix('?') {
        return filter_step(filter.trim());
    }
    if !inside.is_empty() && inside.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(Step::Key(inside.to_string()));
    }
    Err("expected 'name', an index, * or a filter ?@.member == 'value'".into())
}

/// A quoted string literal with `\` escapes, or `None` if `s` is not quoted.
fn quoted(s: &str) -> Result<Option<String>, String> {
    let Some(q) = s.chars().next().filter(|&c| c == '\'' || c == '"') else { return Ok(None) };
    let body = s.get(1..).unwrap_or("");
    let mut out = String::new();
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e) => out.push(e),
                None => return Err("a string ending in `\\`".into()),
            },
            c if c == q => {
                return if chars.as_str().is_empty() {
                    Ok(Some(out))
                } else {
                    Err(format!("text after the closing quote: {:?}", chars.as_str()))
                };
            }
            c => out.push(c),
        }
    }
    Err("an unterminated string".into())
}

/// `@.a.b == 'x'` (optionally in parentheses).
fn filter_step(filter: &str) -> Result<Step, String> {
    let filter = match filter.strip_prefix('(').and_then(|f| f.strip_suffix(')')) {
        Some(inner) => inner.trim(),
        None => filter,
    };
    let (left, right) = filter.split_once("==").ok_or("a filter must compare with `==`: ?@.key == 'value'")?;
    let member_path = left.trim().strip_prefix('@').ok_or("a filter's left side must start with `@`")?;
    let member = json_path(member_path)?
        .into_iter()
        .map(|step| match step {
            Step::Key(name) => Ok(name),
            _ => Err("a filter's member path must name members only".to_string()),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if member.is_empty() {
        return Err("a filter must compare a member of the element (@.name), not the element".into());
    }
    let right = right.trim();
    let equals = match quoted(right)? {
        Some(text) => Literal::Text(text),
        None => Literal::Number(
            right
                .parse::<f64>()
                .map_err(|_| format!("a filter compares with a quoted string or a number, not {right:?}"))?,
        ),
    };
    Ok(Step::Filter { member, equals })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> Step {
        Step::Key(s.into())
    }

    #[test]
    fn json_pointers_follow_rfc_6901() {
        assert_eq!(parse("/a/0/b").unwrap().steps, [key("a"), key("0"), key("b")]);
        assert_eq!(parse("/a~1b/m~0n").unwrap().steps, [key("a/b"), key("m~n")]);
        assert_eq!(parse("/hits/hits/*/_id").unwrap().steps, [key("hits"), key("hits"), Step::Each, key("_id")]);
        assert_eq!(parse("/").unwrap().steps, [key("")], "RFC 6901: the member named \"\"");
        assert!(parse("/a~2").unwrap_err().contains("followed by 0 or 1"));
        assert!(parse("query_id").unwrap_err().contains("\"/query_id\""));
        assert!(parse("").is_err());
    }

    #[test]
    fn json_paths_in_the_supported_subset() {
        assert_eq!(parse("$.a.b").unwrap().steps, [key("a"), key("b")]);
        assert_eq!(parse("$['a.b'][0][*].c").unwrap().steps, [key("a.b"), key("0"), Step::Each, key("c")]);
        assert_eq!(parse("$.hits.*._id").unwrap().steps, [key("hits"), Step::Each, key("_id")]);
        let ga4 = parse("$.event_params[?@.key == 'search_term'].value.string_value").unwrap();
        assert_eq!(
            ga4.steps,
            [
                key("event_params"),
                Step::Filter { member: vec!["key".into()], equals: Literal::Text("search_term".into()) },
                key("value"),
                key("string_value"),
            ]
        );
        assert!(ga4.selects_many());
        assert_eq!(
            parse("$.p[?(@.a.b==3)]").unwrap().steps,
            [key("p"), Step::Filter { member: vec!["a".into(), "b".into()], equals: Literal::Number(3.0) }]
        );
        assert_eq!(parse(r#"$["it's ]"]"#).unwrap().steps, [key("it's ]")]);
        for bad in ["$", "$.", "$[", "$.a[?@ == 'x']", "$.a[?@.k = 'x']", "$.a[?@.k == x]", "$a", "$.a b"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
