//! One source file through syn: its length, its functions' lengths, and the
//! module paths it names outside test code, for the size and import rules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

/// One file, parsed: its length, its functions, and the paths it names.
pub(super) struct Parsed {
    pub(super) lines: usize,
    /// (name, first line, length in lines)
    pub(super) functions: Vec<(String, usize, usize)>,
    /// Every path named outside test code, with its line.
    pub(super) paths: Vec<(Vec<String>, usize)>,
    /// Names this module re-exports (`pub use a::b::C` gives C -> a::b::C).
    pub(super) reexports: BTreeMap<String, Vec<String>>,
    /// Its declared child modules.
    pub(super) children: BTreeSet<String>,
    /// The `static` items outside test code (not `thread_local!`), with
    /// their lines.
    pub(super) statics: Vec<(String, usize)>,
}

pub(super) fn parse(file: &Path) -> Result<Parsed, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let syntax = syn::parse_file(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    let mut collect = Collect::default();
    collect.visit_file(&syntax);
    Ok(Parsed {
        lines: text.lines().count(),
        functions: collect.functions,
        paths: collect.paths,
        reexports: collect.reexports,
        children: collect.children,
        statics: collect.statics,
    })
}

#[derive(Default)]
struct Collect {
    functions: Vec<(String, usize, usize)>,
    paths: Vec<(Vec<String>, usize)>,
    reexports: BTreeMap<String, Vec<String>>,
    children: BTreeSet<String>,
    statics: Vec<(String, usize)>,
}

fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.meta
                .require_list()
                .is_ok_and(|l| l.tokens.to_string() == "test")
    })
}

impl Collect {
    fn function(
        &mut self,
        name: &syn::Ident,
        sig_start: proc_macro2::Span,
        body_end: proc_macro2::Span,
    ) {
        let first = sig_start.start().line;
        let length = body_end.end().line + 1 - first;
        self.functions.push((name.to_string(), first, length));
    }

    fn use_tree(&mut self, prefix: &[String], tree: &syn::UseTree, public: bool, line: usize) {
        let mut path = prefix.to_vec();
        match tree {
            syn::UseTree::Path(p) => {
                path.push(p.ident.to_string());
                self.use_tree(&path, &p.tree, public, line);
            }
            syn::UseTree::Name(n) => {
                path.push(n.ident.to_string());
                if public {
                    self.reexports.insert(n.ident.to_string(), path.clone());
                }
                self.paths.push((path, line));
            }
            syn::UseTree::Rename(r) => {
                path.push(r.ident.to_string());
                if public {
                    self.reexports.insert(r.rename.to_string(), path.clone());
                }
                self.paths.push((path, line));
            }
            syn::UseTree::Glob(_) => self.paths.push((path, line)),
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    self.use_tree(&path, tree, public, line);
                }
            }
        }
    }

    /// Paths inside a macro's tokens (`tokio::select!` bodies, format
    /// arguments): runs of `ident ::` joined, the way the compiler would read them.
    fn tokens(&mut self, tokens: TokenStream) {
        let mut run: Vec<String> = Vec::new();
        let mut colons = 0;
        let mut line = 0;
        for token in tokens {
            match token {
                TokenTree::Ident(ident) if run.is_empty() || colons == 2 => {
                    if run.is_empty() {
                        line = ident.span().start().line;
                    }
                    run.push(ident.to_string());
                    colons = 0;
                    continue;
                }
                TokenTree::Punct(p) if p.as_char() == ':' && !run.is_empty() && colons < 2 => {
                    colons += 1;
                    continue;
                }
                TokenTree::Group(group) => self.tokens(group.stream()),
                _ => {}
            }
            if run.len() > 1 {
                self.paths.push((std::mem::take(&mut run), line));
            }
            run.clear();
            colons = 0;
        }
        if run.len() > 1 {
            self.paths.push((run, line));
        }
    }
}

impl<'ast> Visit<'ast> for Collect {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Fn(i) => &i.attrs,
            syn::Item::Mod(i) => &i.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Use(i) => &i.attrs,
            syn::Item::Const(i) => &i.attrs,
            syn::Item::Static(i) => &i.attrs,
            syn::Item::Struct(i) => &i.attrs,
            syn::Item::Enum(i) => &i.attrs,
            _ => return syn::visit::visit_item(self, item),
        };
        if !is_test(attrs) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_item_static(&mut self, item: &'ast syn::ItemStatic) {
        let line = item.static_token.span.start().line;
        self.statics.push((item.ident.to_string(), line));
        syn::visit::visit_item_static(self, item);
    }

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        if item.content.is_none() {
            self.children.insert(item.ident.to_string());
        }
        syn::visit::visit_item_mod(self, item);
    }

    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        let body_end = item.block.brace_token.span.close();
        self.function(&item.sig.ident, item.sig.fn_token.span, body_end);
        syn::visit::visit_item_fn(self, item);
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        if is_test(&item.attrs) {
            return;
        }
        let body_end = item.block.brace_token.span.close();
        self.function(&item.sig.ident, item.sig.fn_token.span, body_end);
        syn::visit::visit_impl_item_fn(self, item);
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        let public = matches!(
            item.vis,
            syn::Visibility::Public(_) | syn::Visibility::Restricted(_)
        );
        let line = item.use_token.span.start().line;
        self.use_tree(&[], &item.tree, public, line);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments = path
            .segments
            .iter()
            .map(|s| s.ident.to_string())
            .collect::<Vec<_>>();
        if segments.len() > 1 {
            let line = path.segments[0].ident.span().start().line;
            self.paths.push((segments, line));
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.tokens(mac.tokens.clone());
        syn::visit::visit_macro(self, mac);
    }
}
