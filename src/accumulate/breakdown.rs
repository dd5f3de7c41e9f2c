//! The names of an experiment's breakdown groups: the same (experiment, variant) sums kept
//! once more per value of each configured dimension (`ab.dimensions`).
//!
//! A breakdown is made of label groups, so that everything a group has (exact sums, unit
//! buckets, windows, CUPED, the anytime-valid looks, snapshots, deltas, aggregates records and
//! their renumbering by name) a dimension value has too, by the same code. Two kinds of names:
//!
//! * a **part**, `experiment ␞ dimension ␟ value`: one dimension's value; it holds sums, and
//!   its report is the experiment-wide report restricted to the impressions with that value;
//! * a **cell**, `experiment ␞ d1 ␟ v1 ␞ d2 ␟ v2 ...`: an impression's values of every
//!   dimension at once. It holds nothing: an impression of a cell is added to the experiment's
//!   group and to each of its parts (its *expansion*). With one dimension the cell is the part.
//!
//! ␞ and ␟ are the ASCII record and unit separators (U+001E, U+001F). An impression whose
//! experiment or variant contains either is rejected at decoding ([`check_label`]), so no name
//! from outside is read as a breakdown; a dimension's value containing one has it replaced.
//! Names are self-describing, so a pending impression restored under another
//! `ab.dimensions` is still added where it was counted when it arrived.

/// The dimension of an impression's normalized query text (its `query` field): its values are
/// bounded by `ab.max_queries` rather than `ab.max_dimension_values`, and reported per query
/// (`/api/v1/experiments/NAME/queries`), never on `/metrics`.
pub const QUERY: &str = "query";

use crate::config::MAX_DIMENSIONS;

/// Starts each dimension of a breakdown name.
pub const DIMENSION_MARK: char = '\u{1e}';
/// Separates a dimension from its value in a breakdown name.
pub const VALUE_MARK: char = '\u{1f}';

/// What a name carries when its experiment has no breakdown marks: an ordinary experiment.
pub fn is_breakdown(experiment: &str) -> bool {
    experiment.contains(DIMENSION_MARK)
}

/// The experiment a group's experiment label belongs to: itself, or a breakdown's experiment.
pub fn experiment_of(experiment: &str) -> &str {
    experiment.split(DIMENSION_MARK).next().unwrap_or(experiment)
}

/// A breakdown name's experiment and its (dimension, value) pairs, in order; `None` for a name
/// without marks, one whose dimension has no value mark, or one of more dimensions than
/// `ab.dimensions` may name (not a name this module wrote: a state record's names are
/// untrusted, and each pair is a group every impression of the cell is added to).
pub fn parse(name: &str) -> Option<(&str, Vec<(&str, &str)>)> {
    let mut pieces = name.split(DIMENSION_MARK);
    let experiment = pieces.next()?;
    let pairs: Option<Vec<(&str, &str)>> = pieces.map(|piece| piece.split_once(VALUE_MARK)).collect();
    pairs.filter(|p| !p.is_empty() && p.len() <= MAX_DIMENSIONS).map(|p| (experiment, p))
}

/// A part's (experiment, dimension, value); `None` for any other name.
pub fn part(name: &str) -> Option<(&str, &str, &str)> {
    match parse(name)? {
        (experiment, pairs) if pairs.len() == 1 => pairs.first().map(|&(d, v)| (experiment, d, v)),
        _ => None,
    }
}

/// Appends `␞dimension␟value` to a name being written; a value's marks become `?`.
pub fn push_pair(name: &mut String, dimension: &str, value: &str) {
    name.push(DIMENSION_MARK);
    name.push_str(dimension);
    name.push(VALUE_MARK);
    if value.contains([DIMENSION_MARK, VALUE_MARK]) {
        name.extend(value.chars().map(|c| if c == DIMENSION_MARK || c == VALUE_MARK { '?' } else { c }));
    } else {
        name.push_str(value);
    }
}

/// A part's name.
pub fn part_name(experiment: &str, dimension: &str, value: &str) -> String {
    let mut name = String::with_capacity(experiment.len() + dimension.len() + value.len() + 2);
    name.push_str(experiment);
    push_pair(&mut name, dimension, value);
    name
}

/// Refuses an experiment or variant label from outside that contains a breakdown mark.
pub fn check_label(field: &str, label: &str) -> Result<(), String> {
    if label.contains([DIMENSION_MARK, VALUE_MARK]) {
        return Err(format!("`{field}` {label:?} contains U+001E or U+001F, which rankpulse reserves"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_as_written() {
        let mut cell = String::from("ranker");
        push_pair(&mut cell, "device", "mobile");
        push_pair(&mut cell, "market", "d\u{1e}e");
        assert_eq!(parse(&cell), Some(("ranker", vec![("device", "mobile"), ("market", "d?e")])));
        assert_eq!(experiment_of(&cell), "ranker");
        assert_eq!(part(&part_name("ranker", "device", "")), Some(("ranker", "device", "")));
        assert_eq!(part(&cell), None, "a cell of two dimensions is not a part");
        assert_eq!((parse("ranker"), parse("ranker\u{1e}device")), (None, None));
        let too_many: String = (0..=MAX_DIMENSIONS).map(|d| format!("\u{1e}d{d}\u{1f}v")).collect();
        assert_eq!(parse(&format!("ranker{too_many}")), None, "more dimensions than ab.dimensions may name");
        assert!(is_breakdown(&cell) && !is_breakdown("ranker"));
        assert!(check_label("experiment", "a\u{1f}b").is_err() && check_label("variant", "b").is_ok());
    }
}
