"""Tests for ctxwright.tools.search: the tokenizer, BM25 ranking, regex mode, add/remove, errors."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwright.core.request import ToolSpec
from ctxwright.errors import CtxwrightError, ToolCatalogError, ToolSearchError
from ctxwright.tools.search import MAX_QUERY_CHARS, SearchHit, ToolIndex, tokenize, tool_tokens


def spec(name: str, description: str, properties: dict[str, object] | None = None) -> ToolSpec:
    return ToolSpec.create(name, description, {"type": "object", "properties": properties or {}})


CATALOG = [
    spec(
        "github.issues.create",
        "Open a new issue in a GitHub repository.",
        {"repo": {"type": "string", "description": "owner/name"}, "title": {"type": "string"}},
    ),
    spec("github.issues.list", "List the issues of a GitHub repository.", {"repo": {"type": "string"}}),
    spec(
        "github.pulls.merge", "Merge a pull request.", {"repo": {"type": "string"}, "pullNumber": {"type": "integer"}}
    ),
    spec("slack.chat.postMessage", "Send a message to a Slack channel.", {"channelId": {"type": "string"}}),
    spec("calendar_events_create", "Schedule a meeting on the calendar.", {"startTime": {"type": "string"}}),
    spec("s3-delete-object", "Delete one object from an S3 bucket.", {"bucketName": {"type": "string"}}),
    spec(
        "crm_contacts_update",
        "Change fields of a contact.",
        {
            "contact": {
                "type": "object",
                "properties": {"phoneNumber": {"type": "string", "description": "mobile telephone in E.164"}},
            }
        },
    ),
]


def names(hits: list[SearchHit]) -> list[str]:
    return [hit.name for hit in hits]


# -- tokenizer ------------------------------------------------------------------------------


def test_tokenize_splits_dots_underscores_dashes_and_camel_case() -> None:
    assert tokenize("github.issues.create") == ["github", "issue", "create"]
    assert tokenize("calendar_events-create") == ["calendar", "event", "create"]
    assert tokenize("listOpenIssues") == ["listopenissue", "list", "open", "issue"]
    assert tokenize("S3Bucket ec2", identifiers=True) == ["s3bucket", "s3", "bucket", "ec2"]
    assert tokenize("HTTPServer", identifiers=True) == ["httpserver", "http", "server"]


def test_capitalised_words_in_prose_are_names_kept_whole() -> None:
    assert tokenize("Open it in GitHub or PagerDuty") == ["open", "github", "pagerduty"]
    assert tokenize("gitHub") == ["github", "git", "hub"]  # lower-case first: an identifier


def test_words_in_other_scripts_are_kept() -> None:
    assert tokenize("Créer un ticket 工具调用") == ["créer", "un", "ticket", "工具调用"]


def test_tokenize_drops_stopwords_and_folds_plurals_only() -> None:
    assert tokenize("can you list all of my policies and addresses") == ["list", "policy", "address"]
    assert tokenize("status statuses bus analysis") == ["status", "status", "bus", "analysis"]


def test_tool_document_weights_fields_and_walks_nested_parameters() -> None:
    tokens = tool_tokens(CATALOG[-1])
    assert tokens.count("crm_contacts_update") == 3  # the whole name, at the name's weight
    assert tokens.count("crm") == 3
    assert tokens.count("change") == 2  # the description's weight
    assert "phonenumber" in tokens and "telephone" in tokens  # a nested property and its description


# -- ranking --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "best"),
    [
        ("open a new github issue", "github.issues.create"),
        ("show me the issues of a repository", "github.issues.list"),
        ("merge pull request", "github.pulls.merge"),
        ("post a message on slack", "slack.chat.postMessage"),
        ("schedule a meeting", "calendar_events_create"),
        ("remove a file from an s3 bucket", "s3-delete-object"),
        ("change a contact's telephone", "crm_contacts_update"),
    ],
)
def test_paraphrased_queries_rank_the_right_tool_first(query: str, best: str) -> None:
    hits = ToolIndex(CATALOG).search(query)
    assert hits and hits[0].name == best, names(hits)
    assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)
    assert hits[0].spec is next(s for s in CATALOG if s.name == best)


def test_search_limits_results_and_leaves_out_tools_that_match_nothing() -> None:
    index = ToolIndex(CATALOG)
    assert len(index.search("github", limit=2)) == 2
    assert set(names(index.search("github", limit=10))) == {
        "github.issues.create",
        "github.issues.list",
        "github.pulls.merge",
    }
    assert index.search("kubernetes pods") == []
    assert ToolIndex().search("anything") == []


def test_action_synonyms_and_phrasal_verbs_find_the_verb_the_name_uses() -> None:
    index = ToolIndex(
        [
            spec("crm.contacts.get", "Get a contact."),
            spec("crm.contacts.create", "Create a contact."),
            spec("crm.contacts.delete", "Delete a contact."),
            spec("github.pulls.merge", "Merge a pull request."),
        ]
    )
    assert index.search("erase that contact")[0].name == "crm.contacts.delete"
    assert index.search("get rid of the contact")[0].name == "crm.contacts.delete"
    assert index.search("set up a contact")[0].name == "crm.contacts.create"
    hits = index.search("pull up the contact")
    assert hits[0].name == "crm.contacts.get" and "github.pulls.merge" not in names(hits)  # "pull up" is not a pull
    plain = ToolIndex(list(index), expand_actions=False)
    assert plain.search("erase that contact")[0].name == "crm.contacts.get"  # a three-way tie, in catalog order


def test_exact_name_ranks_first_even_when_other_tools_score_higher() -> None:
    crowd = [spec(f"issue_tool_{i}", "issue issue issue create create") for i in range(5)]
    index = ToolIndex([*crowd, spec("issue", "Something unrelated entirely.")])
    assert index.search("issue")[0].name == "issue"
    assert index.search("issue_tool_3")[0].name == "issue_tool_3"


# -- regex ----------------------------------------------------------------------------------


def test_regex_mode_matches_name_before_description_case_insensitively() -> None:
    index = ToolIndex(CATALOG)
    assert names(index.search(r"^github\.issues\.", mode="regex", limit=10)) == [
        "github.issues.create",
        "github.issues.list",
    ]
    hits = index.search("MESSAGE", mode="regex", limit=10)
    assert names(hits) == ["slack.chat.postMessage"]
    by_description = index.search("bucket", mode="regex")
    assert names(by_description) == ["s3-delete-object"] and by_description[0].score < hits[0].score


def test_invalid_regex_is_a_clear_error() -> None:
    with pytest.raises(ToolSearchError, match=r"invalid regular expression '\(unclosed'.*escape"):
        ToolIndex(CATALOG).search("(unclosed", mode="regex")


# -- add / remove ---------------------------------------------------------------------------


def test_add_and_remove_change_what_is_found() -> None:
    index = ToolIndex(CATALOG[:2])
    assert len(index) == 2 and index.names() == ["github.issues.create", "github.issues.list"]
    assert index.search("slack message") == []
    index.add([CATALOG[3]])
    assert names(index.search("slack message")) == ["slack.chat.postMessage"]
    assert index.remove(["github.issues.create", "not.there"]) == 1
    assert "github.issues.create" not in index and len(index) == 2
    assert "github.issues.create" not in names(index.search("create an issue", limit=10))
    index.remove(index.names())
    assert len(index) == 0 and index.search("slack") == []


def test_duplicate_names_are_refused_and_nothing_is_added() -> None:
    index = ToolIndex(CATALOG[:1])
    with pytest.raises(ToolCatalogError, match="already in the index"):
        index.add([CATALOG[1], CATALOG[0]])
    assert index.names() == ["github.issues.create"]
    with pytest.raises(ToolCatalogError):
        ToolIndex([CATALOG[1], CATALOG[1]])


# -- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize("query", ["", "   \n"])
def test_empty_query_is_refused(query: str) -> None:
    with pytest.raises(ToolSearchError, match="empty"):
        ToolIndex(CATALOG).search(query)


def test_over_long_query_is_refused_not_truncated() -> None:
    index = ToolIndex(CATALOG)
    assert index.search("github " * (MAX_QUERY_CHARS // 7))  # just under the limit works
    with pytest.raises(ToolSearchError, match="10,000 characters; the limit is 1,000"):
        index.search("x" * 10_000)


@pytest.mark.parametrize("limit", [0, -1, True, 2.5])
def test_bad_limit_is_refused(limit: object) -> None:
    with pytest.raises(ToolSearchError, match="limit"):
        ToolIndex(CATALOG).search("github", limit=limit)  # type: ignore[arg-type]


def test_search_errors_are_ctxwright_errors() -> None:
    assert issubclass(ToolSearchError, CtxwrightError) and issubclass(ToolCatalogError, CtxwrightError)


# -- property -------------------------------------------------------------------------------

_WORD = st.text(alphabet=string.ascii_letters + string.digits, min_size=1, max_size=8)
_NAME = st.lists(_WORD, min_size=1, max_size=4).flatmap(
    lambda parts: st.sampled_from([".", "_", "-", ""]).map(lambda sep: sep.join(parts))
)
_TOOL = st.tuples(_NAME, st.lists(_WORD, max_size=12).map(" ".join), st.lists(_WORD, max_size=4))


@settings(max_examples=150, deadline=None)
@given(st.lists(_TOOL, min_size=1, max_size=25, unique_by=lambda tool: tool[0]), st.data())
def test_every_tool_is_found_first_by_its_exact_name(
    tools: list[tuple[str, str, list[str]]], data: st.DataObject
) -> None:
    specs = [spec(name, description, {p: {"type": "string"} for p in params}) for name, description, params in tools]
    index = ToolIndex(specs)
    target = data.draw(st.sampled_from(specs))
    assert index.search(target.name, limit=3)[0].name == target.name


def test_searches_stay_consistent_while_another_thread_adds_and_removes() -> None:
    import threading

    index = ToolIndex(CATALOG)
    extra = [spec(f"extra.tool{i}", f"Extra tool number {i} about issues.") for i in range(200)]
    errors: list[BaseException] = []
    stop = threading.Event()

    def churn() -> None:
        try:
            while not stop.is_set():
                index.add(extra)
                index.remove(s.name for s in extra)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    worker = threading.Thread(target=churn)
    worker.start()
    try:
        for _ in range(200):
            hits = index.search("open a new github issue", limit=3)
            assert hits[0].name == "github.issues.create"
            assert all(hit.spec.name == hit.name for hit in hits)
    finally:
        stop.set()
        worker.join(timeout=30)
    assert not errors
    assert len(index) == len(CATALOG)
