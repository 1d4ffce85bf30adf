//! Side outputs of a stream: [`DataStream::get_side_output`], the side-output flag of an
//! operator node, and [`DataStream::split`] of a stream of `Result`s into two streams. Not the
//! operators that emit side outputs (`operator::side`, `operator::split`), nor the tags
//! (`OutputTag`).

use std::marker::PhantomData;

use super::{core, DataStream};
use crate::erased::{unbox, AnyBox};
use crate::error::PlanError;
use crate::graph::{Built, Graph, Node, OpEnv, Port};
use crate::operator::split::SplitOp;
use crate::operator::{BoxOutput, Collector};
use crate::partition::PartitionKind;
use crate::Data;

impl<T: Data> DataStream<T> {
    /// The side output `tag` of the operator that produced this stream (Flink's
    /// `getSideOutput`): the records its function emitted with `ctx.output(&tag, value)`.
    /// Taking the same tag twice gives the same stream. The operator must be a
    /// `process`, `process_with` or `apply` (keyed or not) or a window function; a tag named
    /// like another of the operator's with another type is refused when the job is planned.
    /// See [`OutputTag`](crate::OutputTag) for an example.
    pub fn get_side_output<S: Data>(&self, tag: &crate::OutputTag<S>) -> DataStream<S> {
        let mut g = self.graph.borrow_mut();
        let fail = |g: &mut Graph, message: String| {
            g.errors.push(PlanError::BadConfig {
                key: "get_side_output",
                message,
            });
            DataStream {
                graph: self.graph.clone(),
                producers: Vec::new(),
                partition: PartitionKind::Auto,
                timestamps: None,
                _t: PhantomData,
            }
        };
        let id = match self.producers.as_slice() {
            [(id, _)] => g.settable(*id),
            _ => {
                g.errors.push(PlanError::NotAnOperator {
                    method: "get_side_output",
                });
                return fail(&mut g, format!("side output `{}`", tag.name()));
            }
        };
        let node = &mut g.nodes[id];
        let (op, n_ports) = (node.name.clone(), node.ports.len());
        let Some(tags) = node.side_outputs.as_mut() else {
            return fail(
                &mut g,
                format!(
                    "operator `{op}` has no side outputs (`{}`): only process functions, \
                     derived operators and window functions emit them, from their context",
                    tag.name()
                ),
            );
        };
        let port = match tags.iter().find(|t| &*t.name == tag.name()) {
            Some(t) if t.type_id == std::any::TypeId::of::<S>() => t.port,
            Some(t) => {
                let had = t.type_name;
                return fail(
                    &mut g,
                    format!(
                        "operator `{op}`: side output `{}` was taken as `{had}` and now as `{}`",
                        tag.name(),
                        std::any::type_name::<S>()
                    ),
                );
            }
            None => {
                tags.push(crate::graph::SideTag {
                    name: std::sync::Arc::from(tag.name()),
                    type_id: std::any::TypeId::of::<S>(),
                    type_name: std::any::type_name::<S>(),
                    port: n_ports,
                });
                node.ports.push(Port::<S>::boxed());
                n_ports
            }
        };
        drop(g);
        DataStream::new(self.graph.clone(), id, port)
    }

    /// The operator that produced this stream may emit side outputs (its functions have a
    /// context).
    pub(crate) fn with_side_outputs(self) -> Self {
        self.set("side outputs", |n| {
            n.side_outputs.get_or_insert_with(Vec::new);
        });
        self
    }
}

impl<A: Data, B: Data> DataStream<Result<A, B>> {
    /// Splits `Ok` and `Err` records into two streams (side outputs), without copying.
    pub fn split(self) -> (DataStream<A>, DataStream<B>) {
        self.split_named("split", false)
    }

    pub(crate) fn split_named(
        self,
        name: &str,
        part_of_source: bool,
    ) -> (DataStream<A>, DataStream<B>) {
        let builder = Box::new(move |env: &OpEnv, mut outputs: Vec<AnyBox>| {
            let side_next = unbox::<BoxOutput<B>>(outputs.remove(1));
            let next = unbox::<BoxOutput<A>>(outputs.remove(0));
            let op: BoxOutput<Result<A, B>> = Box::new(SplitOp {
                core: core(env, next),
                side: Collector::with_capacity(0),
                side_next,
            });
            Ok(Built::Inputs {
                heads: vec![Box::new(op) as AnyBox],
                selection: None,
            })
        });
        let part = self.partitioning();
        let mut g = self.graph.borrow_mut();
        let owner = match (part_of_source, self.producers.as_slice()) {
            (true, [(id, _)]) => Some(*id),
            _ => None,
        };
        let id = g.add_node(Node {
            name: name.to_owned(),
            uid: None,
            parallelism: None,
            part_of: owner,
            is_source: false,
            n_inputs: 1,
            side_outputs: None,
            ports: vec![Port::<A>::boxed(), Port::<B>::boxed()],
            builder,
            initial_state: None,
            backup: None,
            stateless: false,
            rescale: crate::rescale::Rule::Stateless,
        });
        self.edges_into(&mut g, id, 0, part);
        drop(g);
        (
            DataStream::new(self.graph.clone(), id, 0),
            DataStream::new(self.graph.clone(), id, 1),
        )
    }
}
