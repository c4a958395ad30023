//! Methods already rewritten by `#[async_trait]`.
//!
//! `#[async_trait]` sits on the `impl` block, so it expands before the
//! attributes of the methods inside: `#[retry]` then finds a plain `fn`
//! returning `Pin<Box<dyn Future<Output = R> + Send>>` whose body is
//! `Box::pin(async move { <moves of the arguments>; let __ret: R = { body }; __ret })`.
//! This module recognises that shape and hands the original body back, so
//! that both orders of expansion give the same protection (tracing's
//! `#[instrument]` does the same).

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::{Block, Expr, FnArg, ItemFn, Pat, Stmt, Type};

/// The parts of an `#[async_trait]` method body.
pub(crate) struct AsyncTraitBody {
    /// `Box::pin`, as written by `#[async_trait]`.
    pub(crate) box_pin: Expr,
    /// The statements that move the arguments into the future, run once.
    pub(crate) prelude: Vec<Stmt>,
    /// `R`, the type the future resolves to.
    pub(crate) output: Type,
    /// The user's body.
    pub(crate) block: Block,
    /// Copies of the moved arguments, made at the start of every attempt.
    pub(crate) per_attempt: Vec<TokenStream>,
}

/// The parts of `item`'s body, if `#[async_trait]` wrote it.
pub(crate) fn detect(item: &ItemFn) -> Option<AsyncTraitBody> {
    if item.sig.asyncness.is_some() || item.block.stmts.len() != 1 {
        return None;
    }
    let Stmt::Expr(Expr::Call(call), None) = &item.block.stmts[0] else {
        return None;
    };
    let Expr::Path(func) = &*call.func else {
        return None;
    };
    let names: Vec<String> = func
        .path
        .segments
        .iter()
        .map(|segment| segment.ident.to_string())
        .collect();
    if !names.ends_with(&["Box".to_owned(), "pin".to_owned()]) || call.args.len() != 1 {
        return None;
    }
    let Expr::Async(future) = &call.args[0] else {
        return None;
    };
    let stmts = &future.block.stmts;
    let position = stmts.iter().position(|stmt| ret_local(stmt).is_some())?;
    let (output, block) = ret_local(&stmts[position])?;
    let self_by_reference = item.sig.inputs.iter().any(
        |input| matches!(input, FnArg::Receiver(receiver) if crate::item::by_reference(receiver)),
    );
    let mut prelude = stmts[..position].to_vec();
    let mut per_attempt = Vec::new();
    for stmt in &mut prelude {
        if let Stmt::Local(local) = stmt {
            let mut bound = Vec::new();
            bindings(&mut local.pat, &mut bound);
            for (ident, mutable) in bound {
                let name = ident.to_string();
                if name.starts_with("__arg") || (name == "__self" && self_by_reference) {
                    continue;
                }
                let mutability = mutable.then(|| quote!(mut));
                let ident = format_ident!("{}", name, span = ident.span());
                per_attempt.push(
                    quote!(let #mutability #ident = ::resilience::__private::clone_arg(&#ident);),
                );
            }
        }
    }
    Some(AsyncTraitBody {
        box_pin: (*call.func).clone(),
        prelude,
        output,
        block,
        per_attempt,
    })
}

/// `let __ret: R = { body };`
fn ret_local(stmt: &Stmt) -> Option<(Type, Block)> {
    let Stmt::Local(local) = stmt else {
        return None;
    };
    let Pat::Type(typed) = &local.pat else {
        return None;
    };
    let Pat::Ident(ident) = &*typed.pat else {
        return None;
    };
    if ident.ident != "__ret" {
        return None;
    }
    let init = local.init.as_ref()?;
    let Expr::Block(block) = &*init.expr else {
        return None;
    };
    Some(((*typed.ty).clone(), block.block.clone()))
}

/// The names a pattern binds, with their `mut` moved to the copies: the
/// moved originals are never mutated.
fn bindings(pat: &mut Pat, out: &mut Vec<(syn::Ident, bool)>) {
    match pat {
        Pat::Ident(ident) => {
            out.push((ident.ident.clone(), ident.mutability.take().is_some()));
            if let Some((_, sub)) = &mut ident.subpat {
                bindings(sub, out);
            }
        }
        Pat::Tuple(tuple) => tuple.elems.iter_mut().for_each(|p| bindings(p, out)),
        Pat::TupleStruct(tuple) => tuple.elems.iter_mut().for_each(|p| bindings(p, out)),
        Pat::Struct(fields) => fields
            .fields
            .iter_mut()
            .for_each(|field| bindings(&mut field.pat, out)),
        Pat::Slice(slice) => slice.elems.iter_mut().for_each(|p| bindings(p, out)),
        Pat::Reference(reference) => bindings(&mut reference.pat, out),
        Pat::Type(typed) => bindings(&mut typed.pat, out),
        Pat::Paren(paren) => bindings(&mut paren.pat, out),
        _ => {}
    }
}
