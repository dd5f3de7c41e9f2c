//! The "Examples:" section of every command's `--help` and man page. Each line that starts with
//! `rankpulse` is a real invocation (files under `config/` are the repository's own; the others
//! are written by an example before it): `tests/cli.rs` parses every one of them and checks that
//! the `config/` files exist. A line starting with `#` says what the next ones do.

pub const TOP: &str = "\
Examples:
  # Everything in one process; the experiment page on http://127.0.0.1:9464/, metrics on /metrics
  rankpulse demo
  # The daemon against your brokers, its configuration checked first
  rankpulse check-config --config config/rankpulse.toml
  rankpulse serve --config config/rankpulse.toml
  # Without Kafka: write the demo's traffic to files, then measure it
  rankpulse generate --impressions imp.jsonl --engagements eng.jsonl --count 60000
  rankpulse replay --impressions imp.jsonl --engagements eng.jsonl --config config/replay-demo.toml
  # The version and the git commit it was built from
  rankpulse --version
  # Each command's own examples
  rankpulse help replay";

pub const DEMO: &str = "\
Examples:
  # Until interrupted; the experiment page on http://127.0.0.1:9464/, metrics on /metrics
  rankpulse demo
  # One minute at 1,000 impressions a second, on another port
  rankpulse demo --duration 60 --rate 1000 --listen 127.0.0.1:9465
  # No malformed messages among the generated ones
  rankpulse demo --faults 0";

pub const SERVE: &str = "\
Examples:
  rankpulse serve --config config/rankpulse.toml
  # A key of the file overridden from the environment (RANKPULSE__SECTION__KEY)
  RANKPULSE__KAFKA__BROKERS=kafka-1:9092,kafka-2:9092 rankpulse serve --config config/rankpulse.toml
  # JSON logs for a log pipeline, the consumer's debug lines included
  RUST_LOG=rankpulse=debug rankpulse serve --config config/rankpulse.toml --log-format json";

pub const REPLAY: &str = "\
Examples:
  # The demo's traffic written to files, as tables
  rankpulse generate --impressions imp.jsonl --engagements eng.jsonl --count 60000
  rankpulse replay --impressions imp.jsonl --engagements eng.jsonl --config config/replay-demo.toml
  # Everything as JSON, and the TREC files of what was measured (for `rankpulse eval`)
  rankpulse replay --impressions imp.jsonl --engagements eng.jsonl --format json --trec-out trec > report.json
  # With the newest windows and the precision-recall curves, whatever the rejects
  rankpulse replay --impressions imp.jsonl --engagements eng.jsonl --windows --curve --max-rejects none
  # Graded metrics from a judgment list (written by `generate --judgments`)
  rankpulse replay --impressions imp.jsonl --engagements eng.jsonl --config config/replay-judged.toml
  # The experiment page of every experiment as one file, to open offline or attach to a ticket
  rankpulse replay --impressions imp.jsonl --engagements eng.jsonl --config config/replay-demo.toml --html report.html";

pub const GENERATE: &str = "\
Examples:
  rankpulse generate --impressions imp.jsonl --engagements eng.jsonl --count 60000
  # With the interleaving duel, and head queries with their judgment list
  rankpulse generate --impressions imp.jsonl --engagements eng.jsonl --interleaving --judgments judgments.jsonl
  # Another seed, with 1 line in 100 malformed
  rankpulse generate --impressions imp.jsonl --engagements eng.jsonl --seed 7 --faults 0.01";

pub const PRODUCE: &str = "\
Examples:
  # To a broker on this machine, 100 searches a second, for ten minutes
  rankpulse produce --brokers localhost:9092 --rate 100 --duration 600
  # To the brokers and topics of a configuration file, with its TLS and SASL settings
  rankpulse produce --config config/rankpulse.toml --faults 0.001";

pub const INTERLEAVE: &str = r#"Examples:
  # Two rankers' lists for one query, interleaved
  echo '{"query_id": "q1", "rankings": {"a": ["d1", "d2", "d3"], "b": ["d2", "d4", "d1"]}}' | rankpulse interleave
  # A file of them, into impressions for `replay`
  rankpulse interleave --input rankings.jsonl > impressions.jsonl"#;

pub const EVAL: &str = "\
Examples:
  # trec_eval's official measures over the files of `replay --trec-out trec`
  rankpulse eval trec/qrels.txt trec/run.txt
  # Per query too, a few measures
  rankpulse eval -q -m map -m P.5,10 -m ndcg_cut.10 trec/qrels.txt trec/run.txt
  # TREC's official usage, as trec_eval 9.0.8 (and pytrec_eval) prints it
  rankpulse eval --compat 9 -q -c -M 1000 -m all_trec trec/qrels.txt trec/run.txt
  # Full precision, as JSON
  rankpulse eval --qrels trec/qrels.txt --run trec/run.txt -m all_trec --format json
  # AutoRAG's retrieval measures over its grouped ground truth
  rankpulse eval --ground-truth gt.jsonl --run run.jsonl";

pub const JUDGMENTS: &str = "\
Examples:
  # Implicit judgments from logged events, with the position-bias estimates
  rankpulse judgments --from-clicks --impressions imp.jsonl --engagements eng.jsonl --out clicks-judgments.jsonl --models-out propensities.json
  # From every replica of a running deployment, graded by the click model
  rankpulse judgments --from-clicks --url http://rankpulse-0:9464 --url http://rankpulse-1:9464 --estimate attractiveness --grades 0.1,0.3,0.6 --out clicks-judgments.jsonl
  # Keep the click table, to merge days later with --table
  rankpulse judgments --from-clicks --impressions imp.jsonl --engagements eng.jsonl --table-out monday.clicks.jsonl";

pub const CHECK_CONFIG: &str = "\
Examples:
  rankpulse check-config --config config/rankpulse.toml
  # A mapping of GA4 export events, tried on a sample of your own events
  rankpulse check-config --config config/examples/ga4.toml --impressions ga4-sample.jsonl --lines 1";

pub const COMPLETIONS: &str = "\
Examples:
  rankpulse completions bash > ~/.local/share/bash-completion/completions/rankpulse
  # zsh: a directory on $fpath (e.g. `fpath+=~/.zfunc` in ~/.zshrc, before compinit)
  rankpulse completions zsh > ~/.zfunc/_rankpulse
  rankpulse completions fish > ~/.config/fish/completions/rankpulse.fish";

pub const MAN: &str = "\
Examples:
  # Read the page at once
  rankpulse man | man -l -
  # Every page where man-db looks (~/.local/share/man, when ~/.local/bin is on PATH)
  rankpulse man --out ~/.local/share/man/man1";
