//! The module layering of `src/`, checked: every module imports only modules of lower pipeline
//! stages, so that a rule has one home and the data flow reads from the bottom up.
//!
//! `lib.rs`'s module map is the prose of this table. A module that is not listed fails the test:
//! a new module must be given its stage on purpose. Test code may reach anywhere (a checkpoint
//! test builds the source's payload), so it is not read.
//!
//! How the code is read: every file the crate compiles is found from `src/lib.rs` through its
//! `mod` declarations and parsed with syn. Whatever carries a test-only attribute (`#[cfg(test)]`,
//! a `cfg` that cannot hold without `test`, `#[test]`) is dropped with everything inside it, and
//! nothing else is: an item, an enum variant, a field, a match arm, a statement. (The text split
//! on the first `#[cfg(test)]` this replaced hid the rest of a file behind a test-only variant:
//! lines 223-455 of `src/source/handoff.rs`.) An import is any path that names a module of the
//! crate, wherever syn shows one (`use` trees, types, expressions, patterns) and inside macro
//! invocations, whose tokens are searched for path shapes: `crate::`, `self::` and `super::`
//! paths resolved from the file's module (`super::engine` in `src/source/mod.rs` is `engine`),
//! and paths starting at a child module.
//!
//! Inside `engine/`, the files are layered too ([`ENGINE_LAYERS`]): an engine file imports only
//! engine files of a lower layer, so no circle runs through them. (Until issue 53 untied it, one
//! ran through seven: the `impl Engine` blocks of the snapshot, the experiment-wide view and the
//! telemetry, the watermark over the tasks, the aggregation holding its own offloading.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proc_macro2::{Spacing, TokenStream, TokenTree};
use syn::punctuated::Punctuated;
use syn::visit::{self, Visit};
use syn::{Attribute, Expr, Item, Meta, Token, UseTree};

/// Each top-level module and its stage, lowest first. A module may import only modules of a
/// lower stage (and itself).
const STAGES: &[(&str, u32)] = &[
    // Vocabulary and lifecycle every stage may use: no imports of the crate.
    ("time", 0),
    ("ids", 0),
    ("health", 0),
    ("shutdown", 0),
    ("kafka_log", 0),
    ("memory", 0),
    ("checkpoint", 0),
    // Pure interleaving credit (the metric layout keeps its sums), metric math (trec_eval
    // definitions) and A/B statistics.
    ("interleaving", 0),
    ("stats", 1),
    // Click models (the inverse-propensity weights the metric layout applies are theirs).
    ("clicks", 1),
    ("metrics", 2),
    // Start-up: the configuration schema and its checks.
    ("config", 3),
    // Reference data read from files or a registry (judgment lists, Avro and Protobuf
    // schemas), as configured.
    ("judgments", 4),
    ("schemas", 4),
    // Decoding (with the schemas).
    ("event", 5),
    // Attribution and aggregation.
    ("join", 6),
    ("accumulate", 6),
    // The A/B reports over the accumulators.
    ("experiments", 7),
    // Orchestration.
    ("engine", 8),
    // Inputs and outputs around the engine.
    ("source", 9),
    ("repartition", 9),
    ("replay", 9),
    ("eval", 9),
    ("output", 9),
    ("demo", 9),
    // Wiring and the command line; the hostile-input entry points, which drive inputs and
    // outputs together.
    ("pipeline", 10),
    ("fuzzing", 10),
    ("commands", 11),
];

/// Each file of `src/engine/` and its layer, lowest first: an engine file may import only engine
/// files of a lower layer (and itself). `mod` is
/// `engine/mod.rs`, the `Engine` itself. A name `mod.rs` re-exports counts as the file it comes
/// from (`super::Task` is `task`'s).
const ENGINE_LAYERS: &[(&str, u32)] = &[
    // No import of another engine file (but for telemetry's and watermark's edges to untie): an
    // arriving impression's judgment, the repartition stage's counters, the rate limit on
    // logging rejections; event counters and latency distributions; input clocks and watermarks;
    // the log of operations on a task's totals.
    ("judge", 0),
    ("routing", 0),
    ("reject_log", 0),
    ("telemetry", 0),
    ("watermark", 0),
    // The operations on a task's totals since its last changelog record, recorded for a delta.
    ("totals_log", 0),
    // What a task's aggregates records carried: its closed windows kept until one does, and
    // what the last one acknowledged left its readers with.
    ("published", 0),
    // A partition's state: its join shard, input clocks and totals, and the state's size; the
    // tasks of the engine's partitions, with their inputs' progress.
    ("task", 1),
    // A finalized impression into a task's totals; the changelog's task record, converted from
    // and into the task.
    ("aggregation", 2),
    ("wire", 2),
    // The older layouts of the state records, each upgraded in one step.
    ("compat", 3),
    // Finalization on worker threads; the limits on the state, enforced by finalizing early.
    ("offload", 3),
    ("limits", 3),
    // A message decoded ahead of the engine, within the limits on one message.
    ("prepare", 4),
    // A partition's snapshot, and whether it fits a configuration.
    ("snapshot", 4),
    // The aggregates record's layouts, this build's and the older ones it reads.
    ("aggregates_record", 5),
    // The experiment-wide view over every partition's sums.
    ("global", 6),
    // The engine's two owned parts: the per-partition core (the tasks and the rules applied to
    // each); what is reported experiment-wide (the closed windows, the looks, the global view).
    ("partitions", 7),
    ("view", 7),
    // The `Engine`, a facade over the parts above.
    ("mod", 8),
    // What exporters read from the `Engine`; the `Engine` behind one lock; a partition's delta
    // since its snapshot, taken from the `Engine` and applied to a snapshot.
    ("read", 9),
    ("shared", 9),
    ("delta", 9),
    // A partition's aggregates record as an increment on the one before, written and applied.
    ("increments", 9),
    // A partition's snapshot taken of the `Engine` and restored into it; the `Engine`'s side of
    // the aggregates topic (its partitions' records written, every partition's applied).
    ("restore", 9),
    ("aggregates_topic", 9),
    // A message into the `Engine`: counted, checked, offered to its partition's task.
    ("process", 9),
];

/// A module's path from the crate root: `src/engine/task.rs` is `["engine", "task"]`.
type ModulePath = Vec<String>;

/// A path in non-test code that names something of the crate, resolved from the crate root
/// (`super::task::Task` in `src/engine/global.rs` is `engine::task::Task`), and its line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Import {
    line: usize,
    path: Vec<String>,
    kind: ImportKind,
}

/// How code names what it imports. A module's re-exports (`pub use`) are its public face: what
/// they name is a dependency of the module, but not of the code beside them, which depends on a
/// re-exported item where it uses it. So the stages count what is written, re-exports included,
/// and the engine's layers count what the code uses: `engine/mod.rs` re-exporting `SharedEngine`
/// from `shared`, which wraps the `Engine`, is no circle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ImportKind {
    /// A path or a private `use`.
    Written,
    /// A `pub use` (any visibility but private).
    ReExport,
    /// A name bound by a `pub use` of the same module, used (`Task` in `engine/mod.rs`, which
    /// re-exports `task::Task`): a use of what the re-export names.
    ThroughReExport,
}

/// One file of the crate: where it is, its module, its syntax tree.
struct SourceFile {
    file: PathBuf,
    module: ModulePath,
    ast: syn::File,
}

/// The crate as compiled outside tests: its files, found from `src/lib.rs` through its `mod`
/// declarations, and every module they declare, inline ones included. A module declared under a
/// test-only attribute is left out, and its file (or folder) is remembered as test code.
struct Crate {
    files: Vec<SourceFile>,
    modules: BTreeSet<ModulePath>,
    test_only: Vec<PathBuf>,
}

impl Crate {
    fn read(src: &Path) -> Crate {
        let mut krate = Crate { files: Vec::new(), modules: BTreeSet::from([Vec::new()]), test_only: Vec::new() };
        krate.read_file(src.join("lib.rs"), src.to_path_buf(), Vec::new());
        krate
    }

    /// Reads `file` as `module`, whose child modules' files are under `dir`, and the files it
    /// declares.
    fn read_file(&mut self, file: PathBuf, dir: PathBuf, module: ModulePath) {
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        self.declared_in(&ast.items, &dir, &module, &file);
        self.files.push(SourceFile { file, module, ast });
    }

    /// The modules `items` of `module` declare (in `file`): inline ones are walked, the files of
    /// the others read.
    fn declared_in(&mut self, items: &[Item], dir: &Path, module: &ModulePath, file: &Path) {
        for item in items {
            let Item::Mod(declared) = item else { continue };
            let name = declared.ident.to_string();
            let child_dir = dir.join(&name);
            if test_only(&declared.attrs) {
                self.test_only.extend([dir.join(format!("{name}.rs")), child_dir]);
                continue;
            }
            assert!(
                !declared.attrs.iter().any(|a| a.path().is_ident("path")),
                "{}: `mod {name}` has a #[path]: tests/architecture.rs does not follow it",
                file.display()
            );
            let mut child = module.clone();
            child.push(name.clone());
            self.modules.insert(child.clone());
            match &declared.content {
                Some((_, inner)) => self.declared_in(inner, &child_dir, &child, file),
                None => {
                    let flat = dir.join(format!("{name}.rs"));
                    let file = if flat.exists() { flat } else { child_dir.join("mod.rs") };
                    self.read_file(file, child_dir, child);
                }
            }
        }
    }

    /// The imports of one file's non-test code, and the names its `use` declarations bind.
    fn imports(&self, source: &SourceFile) -> Collector<'_> {
        let mut collector = Collector::new(&self.modules, source.module.clone());
        collector.visit_file(&source.ast);
        collector
    }
}

/// Whether attributes make what they are on exist only in tests: `#[test]`, or a `cfg` whose
/// predicate cannot hold without `test`.
fn test_only(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|attr| {
        let path = attr.path();
        path.segments.last().is_some_and(|last| last.ident == "test")
            || path.is_ident("cfg") && attr.parse_args::<Meta>().is_ok_and(|predicate| requires_test(&predicate))
    })
}

/// Whether a `cfg` predicate holds only when `test` does: `test`, an `all` with such a member, an
/// `any` of such members only. A `not` never does here (`not(test)` is the code outside tests).
fn requires_test(predicate: &Meta) -> bool {
    match predicate {
        Meta::Path(path) => path.is_ident("test"),
        Meta::List(list) => {
            let Ok(members) = list.parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated) else {
                return false;
            };
            if list.path.is_ident("all") {
                members.iter().any(requires_test)
            } else if list.path.is_ident("any") {
                !members.is_empty() && members.iter().all(requires_test)
            } else {
                false
            }
        }
        Meta::NameValue(_) => false,
    }
}

/// The crate path `path` names when written in `module`, from the crate root: `crate::`,
/// `self::` and `super::` paths, and paths that start at a child module. `None` for anything
/// else (a dependency, the standard library, a local item or type), and for a `super` above the
/// crate root.
fn resolve(modules: &BTreeSet<ModulePath>, module: &[String], path: &[String]) -> Option<Vec<String>> {
    let (first, mut rest) = path.split_first()?;
    let mut at = module.to_vec();
    match first.as_str() {
        "crate" => at.clear(),
        "self" => {}
        "super" => {
            at.pop()?;
        }
        _ => {
            at.push(first.clone());
            return modules.contains(&at).then(|| [at, rest.to_vec()].concat());
        }
    }
    while rest.first().is_some_and(|next| next == "super") {
        at.pop()?;
        rest = &rest[1..];
    }
    Some([at, rest.to_vec()].concat())
}

/// The paths in a macro invocation's tokens, with their lines: syn leaves a macro's input as
/// tokens, so paths are found by their shape, `name::name...` (`crate::time::now` in
/// `format!("{}", crate::time::now())`). A path after a leading `::` is a dependency's. Tokens
/// are not code yet: a test-only attribute among them hides nothing.
fn token_paths(tokens: TokenStream, found: &mut Vec<(usize, Vec<String>)>) {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let mut at = 0;
    while at < tokens.len() {
        let TokenTree::Ident(first) = &tokens[at] else {
            if let TokenTree::Group(group) = &tokens[at] {
                token_paths(group.stream(), found);
            }
            at += 1;
            continue;
        };
        let after_leading_colons = at >= 2 && path_separator(&tokens[at - 2..at]);
        let mut path = vec![first.to_string()];
        let mut next = at + 1;
        while let (Some(separator), Some(TokenTree::Ident(segment))) =
            (tokens.get(next..next + 2), tokens.get(next + 2))
        {
            if !path_separator(separator) {
                break;
            }
            path.push(segment.to_string());
            next += 3;
        }
        if !after_leading_colons && path.len() > 1 {
            found.push((first.span().start().line, path));
        }
        at = next;
    }
}

/// Whether two tokens are `::`.
fn path_separator(pair: &[TokenTree]) -> bool {
    matches!(pair, [TokenTree::Punct(a), TokenTree::Punct(b)]
        if a.as_char() == ':' && a.spacing() == Spacing::Joint && b.as_char() == ':')
}

/// Walks one file's syntax tree, test-only parts left out, and collects its imports and the
/// names its `use` declarations bind.
struct Collector<'a> {
    modules: &'a BTreeSet<ModulePath>,
    /// The module of the code being walked: the file's, or an inline module's inside it.
    module: ModulePath,
    imports: Vec<Import>,
    /// Per module, each name a `use` binds and the crate path it stands for (`None`: a name of a
    /// dependency or of the standard library), so that a re-export can be followed to its file.
    bindings: BTreeMap<ModulePath, BTreeMap<String, Option<Vec<String>>>>,
    /// Per module, the names its `pub use` declarations bind and the crate paths they stand for.
    re_exported: BTreeMap<ModulePath, BTreeMap<String, Vec<String>>>,
    /// Whether the `use` tree being walked is a `pub use`.
    in_pub_use: bool,
}

impl<'a> Collector<'a> {
    fn new(modules: &'a BTreeSet<ModulePath>, module: ModulePath) -> Self {
        Collector {
            modules,
            module,
            imports: Vec::new(),
            bindings: BTreeMap::new(),
            re_exported: BTreeMap::new(),
            in_pub_use: false,
        }
    }

    /// Records `path` (written on `line`) if it names the crate; returns what it names.
    fn import(&mut self, line: usize, path: &[String]) -> Option<Vec<String>> {
        let resolved = resolve(self.modules, &self.module, path)?;
        let kind = if self.in_pub_use { ImportKind::ReExport } else { ImportKind::Written };
        self.imports.push(Import { line, path: resolved.clone(), kind });
        Some(resolved)
    }

    /// Records `path` (written on `line`) if it starts with a name a `pub use` of this module binds.
    fn import_through_re_export(&mut self, line: usize, path: &[String]) {
        let Some((first, rest)) = path.split_first() else { return };
        let Some(bound) = self.re_exported.get(&self.module).and_then(|names| names.get(first)) else { return };
        let path = [bound.clone(), rest.to_vec()].concat();
        self.imports.push(Import { line, path, kind: ImportKind::ThroughReExport });
    }

    /// Records every path of a `use` tree below `prefix` (segments with their lines), and the
    /// names it binds.
    fn use_tree(&mut self, prefix: &mut Vec<(String, usize)>, tree: &UseTree) {
        let line_of = |ident: &syn::Ident| ident.span().start().line;
        match tree {
            UseTree::Path(path) => {
                prefix.push((path.ident.to_string(), line_of(&path.ident)));
                self.use_tree(prefix, &path.tree);
                prefix.pop();
            }
            UseTree::Name(name) => self.use_leaf(prefix, &name.ident, &name.ident),
            UseTree::Rename(rename) => self.use_leaf(prefix, &rename.ident, &rename.rename),
            UseTree::Glob(_) => {
                if let Some((_, line)) = prefix.last() {
                    let segments: Vec<String> = prefix.iter().map(|(segment, _)| segment.clone()).collect();
                    self.import(*line, &segments);
                }
            }
            UseTree::Group(group) => {
                for tree in &group.items {
                    self.use_tree(prefix, tree);
                }
            }
        }
    }

    /// A `use` leaf: `ident` below `prefix` (`self` is the prefix itself), bound as `bound`.
    fn use_leaf(&mut self, prefix: &[(String, usize)], ident: &syn::Ident, bound: &syn::Ident) {
        let mut segments: Vec<String> = prefix.iter().map(|(segment, _)| segment.clone()).collect();
        if ident != "self" {
            segments.push(ident.to_string());
        }
        let resolved = self.import(ident.span().start().line, &segments);
        let name = if bound == "self" { segments.last().cloned().unwrap_or_default() } else { bound.to_string() };
        if let (true, Some(resolved)) = (self.in_pub_use, &resolved) {
            self.re_exported.entry(self.module.clone()).or_default().insert(name.clone(), resolved.clone());
        }
        self.bindings.entry(self.module.clone()).or_default().insert(name, resolved);
    }
}

/// The attributes of an item (none for tokens syn does not parse).
fn item_attrs(item: &Item) -> &[Attribute] {
    match item {
        Item::Const(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::ExternCrate(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::ForeignMod(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::TraitAlias(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Union(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// The attributes of an expression (a statement's are its expression's).
fn expr_attrs(expr: &Expr) -> &[Attribute] {
    match expr {
        Expr::Array(e) => &e.attrs,
        Expr::Assign(e) => &e.attrs,
        Expr::Async(e) => &e.attrs,
        Expr::Await(e) => &e.attrs,
        Expr::Binary(e) => &e.attrs,
        Expr::Block(e) => &e.attrs,
        Expr::Break(e) => &e.attrs,
        Expr::Call(e) => &e.attrs,
        Expr::Cast(e) => &e.attrs,
        Expr::Closure(e) => &e.attrs,
        Expr::Const(e) => &e.attrs,
        Expr::Continue(e) => &e.attrs,
        Expr::Field(e) => &e.attrs,
        Expr::ForLoop(e) => &e.attrs,
        Expr::Group(e) => &e.attrs,
        Expr::If(e) => &e.attrs,
        Expr::Index(e) => &e.attrs,
        Expr::Infer(e) => &e.attrs,
        Expr::Let(e) => &e.attrs,
        Expr::Lit(e) => &e.attrs,
        Expr::Loop(e) => &e.attrs,
        Expr::Macro(e) => &e.attrs,
        Expr::Match(e) => &e.attrs,
        Expr::MethodCall(e) => &e.attrs,
        Expr::Paren(e) => &e.attrs,
        Expr::Path(e) => &e.attrs,
        Expr::Range(e) => &e.attrs,
        Expr::RawAddr(e) => &e.attrs,
        Expr::Reference(e) => &e.attrs,
        Expr::Repeat(e) => &e.attrs,
        Expr::Return(e) => &e.attrs,
        Expr::Struct(e) => &e.attrs,
        Expr::Try(e) => &e.attrs,
        Expr::TryBlock(e) => &e.attrs,
        Expr::Tuple(e) => &e.attrs,
        Expr::Unary(e) => &e.attrs,
        Expr::Unsafe(e) => &e.attrs,
        Expr::While(e) => &e.attrs,
        Expr::Yield(e) => &e.attrs,
        _ => &[],
    }
}

/// Every node that can carry attributes is looked at before it is walked, and left out with
/// everything inside it when they are test-only.
impl<'ast> Visit<'ast> for Collector<'_> {
    fn visit_item(&mut self, item: &'ast Item) {
        if test_only(item_attrs(item)) {
            return;
        }
        match item {
            // A file module is read as a file of its own.
            Item::Mod(module) => {
                if let Some((_, items)) = &module.content {
                    self.module.push(module.ident.to_string());
                    for item in items {
                        self.visit_item(item);
                    }
                    self.module.pop();
                }
            }
            // `::name` is a dependency.
            Item::Use(used) if used.leading_colon.is_none() => {
                self.in_pub_use = !matches!(used.vis, syn::Visibility::Inherited);
                self.use_tree(&mut Vec::new(), &used.tree);
                self.in_pub_use = false;
            }
            Item::Use(_) => {}
            _ => visit::visit_item(self, item),
        }
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let attrs = match item {
            syn::ImplItem::Const(i) => &i.attrs,
            syn::ImplItem::Fn(i) => &i.attrs,
            syn::ImplItem::Type(i) => &i.attrs,
            syn::ImplItem::Macro(i) => &i.attrs,
            _ => &Vec::new(),
        };
        if !test_only(attrs) {
            visit::visit_impl_item(self, item);
        }
    }

    fn visit_trait_item(&mut self, item: &'ast syn::TraitItem) {
        let attrs = match item {
            syn::TraitItem::Const(i) => &i.attrs,
            syn::TraitItem::Fn(i) => &i.attrs,
            syn::TraitItem::Type(i) => &i.attrs,
            syn::TraitItem::Macro(i) => &i.attrs,
            _ => &Vec::new(),
        };
        if !test_only(attrs) {
            visit::visit_trait_item(self, item);
        }
    }

    fn visit_foreign_item(&mut self, item: &'ast syn::ForeignItem) {
        let attrs = match item {
            syn::ForeignItem::Fn(i) => &i.attrs,
            syn::ForeignItem::Static(i) => &i.attrs,
            syn::ForeignItem::Type(i) => &i.attrs,
            syn::ForeignItem::Macro(i) => &i.attrs,
            _ => &Vec::new(),
        };
        if !test_only(attrs) {
            visit::visit_foreign_item(self, item);
        }
    }

    fn visit_variant(&mut self, variant: &'ast syn::Variant) {
        if !test_only(&variant.attrs) {
            visit::visit_variant(self, variant);
        }
    }

    fn visit_field(&mut self, field: &'ast syn::Field) {
        if !test_only(&field.attrs) {
            visit::visit_field(self, field);
        }
    }

    fn visit_arm(&mut self, arm: &'ast syn::Arm) {
        if !test_only(&arm.attrs) {
            visit::visit_arm(self, arm);
        }
    }

    fn visit_local(&mut self, local: &'ast syn::Local) {
        if !test_only(&local.attrs) {
            visit::visit_local(self, local);
        }
    }

    fn visit_stmt_macro(&mut self, statement: &'ast syn::StmtMacro) {
        if !test_only(&statement.attrs) {
            visit::visit_stmt_macro(self, statement);
        }
    }

    fn visit_expr(&mut self, expr: &'ast Expr) {
        if !test_only(expr_attrs(expr)) {
            visit::visit_expr(self, expr);
        }
    }

    fn visit_field_value(&mut self, field: &'ast syn::FieldValue) {
        if !test_only(&field.attrs) {
            visit::visit_field_value(self, field);
        }
    }

    fn visit_field_pat(&mut self, field: &'ast syn::FieldPat) {
        if !test_only(&field.attrs) {
            visit::visit_field_pat(self, field);
        }
    }

    fn visit_fn_arg(&mut self, arg: &'ast syn::FnArg) {
        let attrs = match arg {
            syn::FnArg::Receiver(receiver) => &receiver.attrs,
            syn::FnArg::Typed(typed) => &typed.attrs,
        };
        if !test_only(attrs) {
            visit::visit_fn_arg(self, arg);
        }
    }

    fn visit_generic_param(&mut self, param: &'ast syn::GenericParam) {
        let attrs = match param {
            syn::GenericParam::Lifetime(p) => &p.attrs,
            syn::GenericParam::Type(p) => &p.attrs,
            syn::GenericParam::Const(p) => &p.attrs,
        };
        if !test_only(attrs) {
            visit::visit_generic_param(self, param);
        }
    }

    /// `pub(super)` says who may see an item, not what it uses.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    /// Documentation, derives and lint levels are not code.
    fn visit_attribute(&mut self, _: &'ast Attribute) {}

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() {
            let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
            let line = path.segments[0].ident.span().start().line;
            // One segment is a name in scope (its `use` is counted) or the value `self`.
            if segments.len() > 1 {
                self.import(line, &segments);
            }
            self.import_through_re_export(line, &segments);
        }
        visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        let mut found = Vec::new();
        token_paths(mac.tokens.clone(), &mut found);
        for (line, path) in found {
            self.import(line, &path);
            self.import_through_re_export(line, &path);
        }
    }
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// A file's path as reports name it: `src/engine/task.rs`.
fn shown(file: &Path) -> String {
    file.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap_or(file).display().to_string()
}

/// The imports of `module` (written in `file`) that break [`STAGES`], one `file:line: ...` each.
fn stage_violations(file: &str, module: &str, imports: &[Import], stages: &BTreeMap<&str, u32>) -> Vec<String> {
    let Some(&own) = stages.get(module) else {
        return vec![format!("{file}: module `{module}` has no stage in STAGES")];
    };
    let mut violations = Vec::new();
    for Import { line, path, kind } in imports {
        if *kind == ImportKind::ThroughReExport {
            continue; // its `pub use` is counted
        }
        let Some(imported) = path.first() else {
            violations.push(format!("{file}:{line}: `{module}` imports the crate root"));
            continue;
        };
        if imported == module {
            continue;
        }
        match stages.get(imported.as_str()) {
            Some(&theirs) if theirs < own => {}
            Some(&theirs) => violations.push(format!(
                "{file}:{line}: `{module}` (stage {own}) imports `{}` (stage {theirs}): not a lower stage",
                path.join("::")
            )),
            None => violations.push(format!("{file}:{line}: unknown module `{imported}`")),
        }
    }
    violations
}

#[test]
fn every_module_imports_only_lower_stages() {
    let krate = Crate::read(&src());
    let stages: BTreeMap<&str, u32> = STAGES.iter().copied().collect();
    let mut violations = Vec::new();
    for source in &krate.files {
        // `lib.rs` only declares the modules.
        let Some(module) = source.module.first() else { continue };
        let imports = krate.imports(source).imports;
        violations.extend(stage_violations(&shown(&source.file), module, &imports, &stages));
    }
    assert!(violations.is_empty(), "layering violations:\n{}", violations.join("\n"));
}

/// A file under `src/` that the crate does not compile is not checked either: it must be test
/// code (declared under a test-only attribute) or the binary's `main.rs`, whose imports are the
/// library's public ones.
#[test]
fn every_file_of_src_is_read() {
    let src = src();
    let krate = Crate::read(&src);
    let read: BTreeSet<&Path> = krate.files.iter().map(|f| f.file.as_path()).collect();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let unread: Vec<String> = files
        .iter()
        .filter(|file| !read.contains(file.as_path()) && **file != src.join("main.rs"))
        .filter(|file| !krate.test_only.iter().any(|test| file.starts_with(test)))
        .map(|file| shown(file))
        .collect();
    assert!(unread.is_empty(), "files of src/ not reached from src/lib.rs:\n{}", unread.join("\n"));
}

/// The engine file an imported path's item is in: the child module it names, or the file a name
/// of `engine/mod.rs`'s `use` declarations comes from (`super::Task` is `task`'s), else `mod`
/// (`super::Engine`). `None` outside the engine, and for a name `mod.rs` imports from elsewhere.
fn engine_file(
    modules: &BTreeSet<ModulePath>,
    mod_rs_bindings: &BTreeMap<String, Option<Vec<String>>>,
    path: &[String],
) -> Option<String> {
    let mut path = path.to_vec();
    // A re-export of a re-export is followed as far as it goes.
    for _ in 0..8 {
        if path.first().map(String::as_str) != Some("engine") {
            return None;
        }
        let Some(name) = path.get(1) else { return Some("mod".to_string()) };
        if modules.contains(&path[..2]) {
            return Some(name.clone());
        }
        match mod_rs_bindings.get(name) {
            Some(Some(bound)) => path = [bound.clone(), path[2..].to_vec()].concat(),
            Some(None) => return None,
            None => return Some("mod".to_string()),
        }
    }
    Some("mod".to_string())
}

/// The imports between engine files, `(from, to)`, each with where it is first written.
fn engine_edges(krate: &Crate) -> BTreeMap<(String, String), String> {
    let mod_rs = krate.files.iter().find(|f| f.module == ["engine"]).expect("src/engine/mod.rs");
    let mod_rs_bindings = krate.imports(mod_rs).bindings.remove(&mod_rs.module).unwrap_or_default();
    let mut edges = BTreeMap::new();
    for source in krate.files.iter().filter(|f| f.module.first().is_some_and(|m| m == "engine")) {
        let from = source.module.get(1).cloned().unwrap_or_else(|| "mod".to_string());
        for Import { line, path, kind } in krate.imports(source).imports {
            if kind == ImportKind::ReExport {
                continue;
            }
            let Some(to) = engine_file(&krate.modules, &mod_rs_bindings, &path) else { continue };
            if to != from {
                edges.entry((from.clone(), to)).or_insert_with(|| format!("{}:{line}", shown(&source.file)));
            }
        }
    }
    edges
}

#[test]
fn engine_files_import_only_lower_layers() {
    let krate = Crate::read(&src());
    let layers: BTreeMap<&str, u32> = ENGINE_LAYERS.iter().copied().collect();
    let files: BTreeSet<String> = krate
        .files
        .iter()
        .filter(|f| f.module.first().is_some_and(|m| m == "engine"))
        .map(|f| f.module.get(1).cloned().unwrap_or_else(|| "mod".to_string()))
        .collect();
    let mut violations = Vec::new();
    for file in &files {
        if !layers.contains_key(file.as_str()) {
            violations.push(format!("engine file `{file}` has no layer in ENGINE_LAYERS"));
        }
    }
    for file in layers.keys().filter(|file| !files.contains(**file)) {
        violations.push(format!("ENGINE_LAYERS names `{file}`, which is no file of src/engine/"));
    }
    let edges = engine_edges(&krate);
    let upward = |from: &str, to: &str| match (layers.get(from), layers.get(to)) {
        (Some(from), Some(to)) => to >= from,
        _ => false, // reported above
    };
    for ((from, to), at) in &edges {
        if upward(from, to) {
            violations.push(format!(
                "{at}: engine file `{from}` (layer {}) imports `{to}` (layer {}): not a lower layer",
                layers[from.as_str()],
                layers[to.as_str()]
            ));
        }
    }
    assert!(violations.is_empty(), "engine layering violations:\n{}", violations.join("\n"));
}

/// The imports the checker finds in `code`, written in `module` of a crate of `modules`.
fn imports_in(code: &str, module: &[&str], modules: &[&[&str]]) -> Vec<Import> {
    let path = |names: &[&str]| -> ModulePath { names.iter().map(|name| name.to_string()).collect() };
    let modules: BTreeSet<ModulePath> = modules.iter().map(|m| path(m)).chain([Vec::new()]).collect();
    let mut collector = Collector::new(&modules, path(module));
    collector.visit_file(&syn::parse_file(code).unwrap());
    collector.imports
}

/// [`imports_in`]'s written imports (re-exports included) as `line: path` (`3: time::now`).
fn written_in(code: &str, module: &[&str], modules: &[&[&str]]) -> Vec<String> {
    let imports = imports_in(code, module, modules);
    let written = imports.iter().filter(|i| i.kind != ImportKind::ThroughReExport);
    written.map(|i| format!("{}: {}", i.line, i.path.join("::"))).collect()
}

#[test]
fn the_checker_sees_an_upward_import() {
    let code = "use crate::engine::Engine;\n// crate::source in a comment\nfn f() { crate::time::now(); }";
    assert_eq!(written_in(code, &["join"], &[]), ["1: engine::Engine", "3: time::now"]);
    let stages: BTreeMap<&str, u32> = STAGES.iter().copied().collect();
    let imports = imports_in(code, &["join"], &[]);
    assert_eq!(
        stage_violations("src/join.rs", "join", &imports, &stages),
        ["src/join.rs:1: `join` (stage 6) imports `engine::Engine` (stage 8): not a lower stage"]
    );
}

#[test]
fn a_test_only_variant_hides_only_itself() {
    let code = "\
enum Decoding {
    Balanced,
    #[cfg(test)]
    Here(crate::source::Probe),
    Carried(crate::time::EventTime),
}
fn push(decoding: Decoding) -> bool {
    match decoding {
        Decoding::Balanced => crate::ids::busy(),
        #[cfg(test)]
        Decoding::Here(_) => crate::source::here(),
        Decoding::Carried(_) => crate::health::ready(),
    }
}";
    assert_eq!(written_in(code, &["join"], &[]), ["5: time::EventTime", "9: ids::busy", "12: health::ready"]);
}

#[test]
fn a_test_only_fn_hides_only_itself() {
    let code = "\
#[cfg(test)]
fn probe() { crate::source::probe(); }
fn now() { crate::time::now(); }
#[cfg(all(test, unix))]
fn unix_probe() { crate::source::probe(); }
#[cfg(any(test, feature = \"oidc\"))]
fn oidc() { crate::config::oidc(); }
#[cfg(not(test))]
fn live() { crate::health::ready(); }
impl Engine {
    #[test]
    fn a_test() { crate::source::probe(); }
    fn ids(&self) { let _ = crate::ids::of(); }
}";
    assert_eq!(
        written_in(code, &["join"], &[]),
        ["3: time::now", "7: config::oidc", "9: health::ready", "13: ids::of"]
    );
}

#[test]
fn super_paths_resolve_from_the_files_module() {
    let code = "\
use super::super::engine::Engine;
use super::super::super::engine::Task;
fn f() { let _ = self::inner::Inner; }
fn g() { super::super::super::super::nothing(); }";
    assert_eq!(
        written_in(code, &["source", "x", "y"], &[]),
        ["1: source::engine::Engine", "2: engine::Task", "3: source::x::y::inner::Inner"]
    );
    // From `src/source/mod.rs`, `super::` is the crate root: another top-level module.
    assert_eq!(written_in("use super::engine::Engine;", &["source"], &[]), ["1: engine::Engine"]);
    // A path may start at a child module.
    let modules: &[&[&str]] = &[&["engine"], &["engine", "task"]];
    assert_eq!(
        written_in("use task::TaskTemplate;\nfn f(t: task::Tasks) {}", &["engine"], modules),
        ["1: engine::task::TaskTemplate", "2: engine::task::Tasks"]
    );
}

#[test]
fn a_use_tree_yields_every_path() {
    let code = "use crate::{accumulate::Groups, engine::{self, Engine}, time::*};\nuse ::std::time::Instant;";
    assert_eq!(
        written_in(code, &["source"], &[]),
        ["1: accumulate::Groups", "1: engine", "1: engine::Engine", "1: time"]
    );
}

#[test]
fn macro_tokens_and_visibilities() {
    let code = "\
pub(super) fn f() {
    println!(\"{}\", crate::time::now());
    assert!(::std::thread::panicking());
}
pub(in crate::engine) fn g() {}";
    assert_eq!(written_in(code, &["engine", "task"], &[]), ["2: time::now"]);
}

#[test]
fn a_re_export_is_followed_to_its_file() {
    let modules: &[&[&str]] = &[&["engine"], &["engine", "task"]];
    let code = "pub use task::Task;\nuse crate::time::EventTime;\nstruct Engine { tasks: Vec<Task> }";
    let imports = imports_in(code, &["engine"], modules);
    let kinds: Vec<(usize, ImportKind)> = imports.iter().map(|i| (i.line, i.kind)).collect();
    assert_eq!(kinds, [(1, ImportKind::ReExport), (2, ImportKind::Written), (3, ImportKind::ThroughReExport)]);
    let path = |p: &str| -> Vec<String> { p.split("::").map(str::to_string).collect() };
    let modules: BTreeSet<ModulePath> = modules.iter().map(|m| m.iter().map(|s| s.to_string()).collect()).collect();
    let bindings = BTreeMap::from([
        ("Task".to_string(), Some(path("engine::task::Task"))),
        ("EventTime".to_string(), Some(path("time::EventTime"))),
        ("Instant".to_string(), None),
    ]);
    let file = |p: &str| engine_file(&modules, &bindings, &path(p));
    assert_eq!(file("engine::Task::new"), Some("task".to_string()));
    assert_eq!(file("engine::task::Tasks"), Some("task".to_string()));
    assert_eq!(file("engine::Engine"), Some("mod".to_string()));
    assert_eq!(file("engine"), Some("mod".to_string()));
    assert_eq!(file("engine::EventTime"), None);
    assert_eq!(file("engine::Instant"), None);
    assert_eq!(file("time::EventTime"), None);
}

/// The no-panic rule (`src/lib.rs`, "Hostile input"): denied outside tests in every file that
/// reads bytes from outside (messages, changelog and aggregates records, the configuration).
const NO_PANIC_RULE: &str =
    "#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]";

/// The files under the rule, besides every file of `src/event/` (a new decoder is under it
/// whether or not it is listed). `config/mod.rs` covers its submodules: lint levels are inherited.
const NO_PANIC_FILES: &[&str] = &[
    "time.rs",
    "checkpoint.rs",
    "config/mod.rs",
    "schemas/mod.rs",
    "source/chunks.rs",
    "source/changelog.rs",
    "source/aggregates.rs",
    "engine/snapshot.rs",
    "engine/wire.rs",
    "engine/compat.rs",
    "engine/restore.rs",
    "engine/aggregates_topic.rs",
    "engine/delta.rs",
    "engine/increments.rs",
    "engine/aggregates_record.rs",
    "engine/totals_log.rs",
    "join/pending/wire.rs",
    "join/expiry/wire.rs",
    "source/record.rs",
    "source/standby.rs",
    "clicks/named.rs",
    "clicks/log/snapshot.rs",
    "accumulate/cuped.rs",
    "repartition/encode.rs",
];

#[test]
fn modules_that_read_input_deny_panics() {
    let src = src();
    let mut files: Vec<PathBuf> = NO_PANIC_FILES.iter().map(|f| src.join(f)).collect();
    rust_files(&src.join("event"), &mut files);
    let mut missing = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        // An inner attribute: after the module documentation, before anything else.
        let head: Vec<&str> = text.lines().skip_while(|l| l.starts_with("//!")).take(1).collect();
        if head != [NO_PANIC_RULE] {
            missing.push(file.display().to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "the no-panic rule is not the first line after the module documentation of:\n{}\nit is: {NO_PANIC_RULE}",
        missing.join("\n")
    );
}
