"""The call DAG: dependencies from placeholders and dependsOn, and plan errors for the model."""

from __future__ import annotations

from typing import Any

from pes_agent.execution.dag import CallGraph, plan_errors
from pes_agent.planning.plan import ParsedToolCall


def call(call_id: str, depends_on: list[str] | None = None, **arguments: Any) -> ParsedToolCall:
    return ParsedToolCall(
        call_id=call_id, tool_name="t", arguments=arguments, depends_on=depends_on or []
    )


def test_valid_plan_has_no_errors() -> None:
    """Placeholders to earlier steps and dependsOn to known ids are fine."""
    calls = [
        call("a", q="x"),
        call("b", q="{step_1_result}"),
        call("c", ["a", "b"], q="<step_2_result.x>"),
    ]
    assert plan_errors(calls) == []


def test_dependencies_combine_placeholders_and_depends_on() -> None:
    """Each call depends on the steps it references and the ids it lists."""
    graph = CallGraph.build(
        [call("a"), call("b"), call("c", ["b"], q="{step_1_result}"), call("d")]
    )
    assert graph.dependencies == (frozenset(), frozenset(), frozenset({0, 1}), frozenset())
    assert graph.dependents == ((2,), (2,), (), ())
    assert graph.problems == ((), (), (), ())


def test_every_placeholder_is_an_edge_whatever_the_arguments_hold() -> None:
    """Placeholders in plain strings, nested dicts and lists, beside numbers, booleans and
    None, several in one string, in either delimiter: each adds an edge, and nothing else does."""
    graph = CallGraph.build(
        [
            call("a", n=1, flag=True, none=None, text="step_ 1 is not a placeholder"),
            call("b", x=1.5, q="{step_1_result} and <step_1_result.k>"),
            call("c", q="from {step_1_result} and { step_2_result }", n=3),
            call("d", nested={"deep": ["{step_3_result}"]}, n=0),
            call("e", items=["<step_2_result[0]>", 7], q="plain"),
            call("f", n=None, q="{step_5_result}", r="<step_4_result>"),
        ]
    )
    assert graph.dependencies == (
        frozenset(),
        frozenset({0}),
        frozenset({0, 1}),
        frozenset({2}),
        frozenset({1}),
        frozenset({3, 4}),
    )
    assert graph.problems == ((),) * 6


def test_several_bad_references_in_one_call_are_reported_in_step_order() -> None:
    """A call's problems follow the step numbers it refers to, not the order written."""
    assert plan_errors([call("a", q="{step_9_result} {step_0_result}", r="{step_1_result}")]) == [
        'Step 1 ("a") refers to step_0_result, but steps are numbered from 1.',
        'Step 1 ("a") refers to its own result (step_1_result); a call can only use the '
        "results of earlier steps.",
        'Step 1 ("a") refers to step_9_result, but the plan has only 1 tool call.',
    ]


def test_reference_to_a_missing_step_names_the_plan_size() -> None:
    """A step number beyond the plan is an error saying how many calls there are."""
    assert plan_errors([call("a"), call("b", q="{step_5_result}")]) == [
        'Step 2 ("b") refers to step_5_result, but the plan has only 2 tool calls.'
    ]


def test_reference_to_step_zero_says_steps_start_at_one() -> None:
    """{step_0_result} is explained as 1-based numbering."""
    assert plan_errors([call("a", q="{step_0_result}")]) == [
        'Step 1 ("a") refers to step_0_result, but steps are numbered from 1.'
    ]


def test_reference_to_a_later_step_asks_to_reorder() -> None:
    """Using a later step's result is an error asking to reorder."""
    assert plan_errors([call("a", q="{step_2_result}"), call("b")]) == [
        'Step 1 ("a") refers to step_2_result, a later step; a call can only use the results '
        "of earlier steps, so reorder the calls."
    ]


def test_reference_to_itself_is_an_error() -> None:
    """A call cannot use its own result."""
    assert plan_errors([call("a"), call("b", q="<step_2_result>")]) == [
        'Step 2 ("b") refers to its own result (step_2_result); a call can only use the '
        "results of earlier steps."
    ]


def test_depends_on_unknown_id_and_itself() -> None:
    """dependsOn must name another call of the plan."""
    assert plan_errors([call("a", ["ghost"]), call("b", ["b"])]) == [
        'Step 1 ("a") depends on "ghost", which is not a call id in this plan.',
        'Step 2 ("b") depends on itself ("b").',
    ]


def test_duplicate_call_ids_are_reported_once_per_repeat() -> None:
    """A reused callId names the step that used it first."""
    assert plan_errors([call("a"), call("b"), call("a")]) == [
        'Step 3 ("a") reuses the call id "a" of step 1; give every call a unique callId.'
    ]


def test_cycle_is_named_call_by_call() -> None:
    """A dependsOn cycle is one error naming the calls in cycle order."""
    errors = plan_errors([call("a", ["c"]), call("b", ["a"]), call("c", ["b"]), call("d")])
    assert errors == [
        'The calls "a" -> "c" -> "b" -> "a" form a dependency cycle, so none of them can run; '
        "remove one of these dependencies."
    ]


def test_cycle_through_a_later_placeholder_is_reported_too() -> None:
    """A later-step placeholder that closes a cycle gives both errors."""
    errors = plan_errors([call("a", q="{step_2_result}"), call("b", ["a"])])
    assert len(errors) == 2
    assert "a later step" in errors[0]
    assert errors[1].startswith('The calls "a" -> "b" -> "a" form a dependency cycle')


def test_every_call_of_interlocked_cycles_is_named_in_the_plan_errors() -> None:
    """Cycles 1<->2 and 2<->3 sharing call 2 name all three calls; call 4 (-> 1) is no member."""
    calls = [call("c1", ["c2"]), call("c2", ["c1", "c3"]), call("c3", ["c2"]), call("c4", ["c1"])]
    errors = plan_errors(calls)
    assert errors == [
        'The calls "c1" -> "c2" -> "c1" form a dependency cycle, so none of them can run; '
        "remove one of these dependencies.",
        'The calls "c3" -> "c2" -> "c3" form a dependency cycle, so none of them can run; '
        "remove one of these dependencies.",
    ]
    graph = CallGraph.build(calls)
    assert [bool(problems) for problems in graph.problems] == [True, True, True, False]


def test_two_cycles_joined_into_one_group_leave_no_call_waiting() -> None:
    """In 1<->2, 3<->4, 2->3, 4->1 every call is refused, so none is left waiting forever."""
    calls = [
        call("c1", ["c2"]),
        call("c2", ["c1", "c3"]),
        call("c3", ["c4"]),
        call("c4", ["c3", "c1"]),
    ]
    graph = CallGraph.build(calls)
    assert all(graph.problems)
    assert sorted(graph.order()) == [0, 1, 2, 3]
    assert any('"c3" -> "c4" -> "c3"' in error for error in graph.errors)


def test_calls_with_problems_wait_for_nothing_so_the_graph_stays_acyclic() -> None:
    """Cycle members are marked with problems and their edges dropped."""
    graph = CallGraph.build([call("a", ["b"]), call("b", ["a"]), call("c", ["a"])])
    assert graph.dependencies == (frozenset(), frozenset(), frozenset({0}))
    assert graph.problems[0]
    assert graph.problems[1]
    assert graph.problems[2] == ()
    assert graph.order() == [0, 1, 2]


def test_order_keeps_plan_order_but_runs_depends_on_first() -> None:
    """order() is plan order, except a call named in dependsOn moves before its dependent."""
    graph = CallGraph.build([call("a", ["c"]), call("b"), call("c")])
    assert graph.order() == [1, 2, 0]


def test_long_chain_does_not_hit_the_recursion_limit() -> None:
    """Cycle detection is iterative: a 5,000-call chain is checked without recursion errors."""
    calls = [call("c0")] + [call(f"c{i}", [f"c{i - 1}"]) for i in range(1, 5000)]
    assert plan_errors(calls) == []


def test_a_step_number_of_thousands_of_digits_is_not_a_reference_and_does_not_fail() -> None:
    """Model text with a step number Python would refuse to read is plain text: the plan has
    no error for it (it used to raise ValueError out of plan_errors)."""
    text = "{step_" + "9" * 5000 + "_result}"
    assert plan_errors([call("a", q=text), call("b", q={"deep": [text]})]) == []
    assert plan_errors([call("a", q="{step_" + "9" * 18 + "_result}")]) == [
        f'Step 1 ("a") refers to step_{10**18 - 1}_result, but the plan has only 1 tool call.'
    ]
