//! Type-erased values ([`AnyBox`]) between the untyped physical plan and the typed operators,
//! channels and gates: the plan wires boxes, and code that knows the record type unboxes them.

use std::any::Any;

/// A type-erased value: a `BoxOutput<T>`, a `Sender<T>` or a `Receiver<T>`.
pub(crate) type AnyBox = Box<dyn Any + Send>;

/// Downcasts an erased value that was typed by the same graph.
pub(crate) fn unbox<T: 'static>(b: AnyBox) -> T {
    match b.downcast::<T>() {
        Ok(v) => *v,
        Err(_) => unreachable!(
            "internal error: graph wiring type mismatch for {}",
            std::any::type_name::<T>()
        ),
    }
}
