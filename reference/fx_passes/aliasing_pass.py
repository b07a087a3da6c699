"""AliasingOutputRewritePass: outputs that alias an input or another output are re-derived last.

In eager, ``y = x.add_(1); return y`` hands the caller ``x`` itself, and ``return h, h.view(-1)``
hands back two tensors sharing storage. A compiled artifact returns fresh buffers, so this
aliasing must be kept outside the artifact: AOT Autograd's runtime restores it, as long as the
graph still says *which* input or output each aliasing output is a view of.

The in-place rewrite that runs after this pass erases exactly that information: once
``x.add_(1)`` is ``add(x, 1)`` plus a copy back, ``y`` is a fresh value. So this pass must run
while the in-place ops are still in the graph. For every output whose value shares storage with
a graph input, or with another output, it

1. follows the chain of views and in-place results back to that base (see ``_graph.alias_chain``),
2. replays the chain's views on the base at the end of the graph, after every mutation, so the
   replay reads the base's final value as eager's view would,
3. points the output at the replay and tags the replayed nodes (``meta["fx_output_alias"]``), so the
   in-place rewrite places its copy back before them and leaves their reads of an input alone.

What it found is recorded in ``gm.meta["fx_aliased_outputs"]`` (one entry per aliasing output).
Outputs that only alias an intermediate nobody else returns are not observable and are left alone.
"""

from __future__ import annotations

from torch.fx import GraphModule, Node

from reference.fx_passes import _graph
from reference.fx_passes.base import FXPass, FXPassError, PassContext

ALIAS_TAG = "fx_output_alias"
RECORD_KEY = "fx_aliased_outputs"


class AliasingOutputRewritePass(FXPass):
    """Finds outputs aliasing an input or another output and re-derives them from their base."""

    version = 1

    def transform(self, gm: GraphModule, ctx: PassContext) -> GraphModule:
        graph_name = ctx.graph_name
        leaves = _graph.flat_outputs(gm)
        tensor_leaves = [(path, v) for path, v in leaves if isinstance(v, Node)]
        # Which output positions hold which base value (an output that *is* a base, unchanged).
        direct = {}
        for i, (_, value) in enumerate(tensor_leaves):
            base, views = _graph.alias_chain(value)
            if base is value and not views:
                direct.setdefault(value, i)

        found: list[dict] = []
        output = _graph.output_node(gm)
        for i, (path, value) in enumerate(tensor_leaves):
            base, views = _graph.alias_chain(value)
            if base is value:
                continue  # a fresh value (or the input itself, returned as is)
            if _graph.is_input(base):
                kind, base_output = "input", None
            else:
                base_output = direct.get(base)
                if base_output is None:
                    base_output = next(
                        (j for j, (_, other) in enumerate(tensor_leaves) if j != i and _graph.alias_chain(other)[0] is base),
                        None,
                    )
                if base_output is None:
                    continue  # aliases an intermediate no other output shares: not observable
                kind = "output"
            replay = self._replay(gm, output, base, views, graph_name, value)
            for n in replay:
                n.meta[ALIAS_TAG] = {"base": base.name, "kind": kind}
            new_leaf = replay[-1] if replay else base
            _graph.replace_output_leaf(gm, path, new_leaf)
            found.append(
                {
                    "output": i,
                    "was": value.name,
                    "base": base.name,
                    "kind": kind,
                    "base_output": base_output,
                    "views": [_graph.describe(v) for v in views],
                }
            )
            self._drop_if_dead(gm, value)

        gm.meta[RECORD_KEY] = gm.meta.get(RECORD_KEY, []) + found
        return _graph.finish(gm) if found else gm

    def _replay(self, gm: GraphModule, output: Node, base: Node, views: list[Node], graph_name: str, value: Node) -> list[Node]:
        replay: list[Node] = []
        src = base
        with gm.graph.inserting_before(output):
            for view in views:
                args = list(view.args)
                if not args or args[0] is not _graph.first_tensor_arg(view):
                    raise FXPassError(
                        self.name,
                        graph_name,
                        f"output {value.name!r} is a view made by {_graph.describe(view)} whose tensor is not its "
                        "first positional argument, so the view cannot be replayed on its base; "
                        "call the view as a tensor method",
                        node=view.name,
                    )
                args[0] = src
                new = gm.graph.create_node(view.op, view.target, tuple(args), dict(view.kwargs), name=f"{view.name}_alias")
                new.meta.update({k: v for k, v in view.meta.items() if k in ("val", "example_value", "tensor_meta")})
                replay.append(new)
                src = new
        return replay

    @staticmethod
    def _drop_if_dead(gm: GraphModule, node: Node) -> None:
        # Remove the original view chain if nothing reads it any more (in-place nodes stay: they
        # write data the graph still needs).
        while node.op not in ("placeholder", "get_attr") and not node.users and _graph.is_view(node):
            src = _graph.first_tensor_arg(node)
            gm.graph.erase_node(node)
            if src is None:
                break
            node = src
