"""The skills and tasks of ``benchmarks/skills.py``: twenty installed skills, a twenty-first
added mid-session, and writing tasks whose house style only a skill's body states.

Each skill is a real folder (``SKILL.md`` with spec-valid front matter, a body of a few hundred
tokens, a reference file); the bodies are built from per-skill steps, rules and an example
under one layout, as skill collections usually share one. Five skills are *style* skills: their
rules (a title line, a fixed sign-off, a banned word...) are checked by code on the answer;
the other fifteen are plausible neighbours that a task must not pick.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOUSE_STYLE = ROOT / "examples" / "skills" / "house-style"


@dataclass(frozen=True)
class SkillDef:
    name: str
    description: str
    title: str
    purpose: str
    steps: tuple[str, ...]
    rules: tuple[str, ...]
    example: str
    reference: str = ""


def _d(name: str, description: str, title: str, purpose: str, steps: str, rules: str, example: str) -> SkillDef:
    return SkillDef(
        name=name,
        description=description,
        title=title,
        purpose=purpose,
        steps=tuple(s.strip() for s in steps.strip().split("\n") if s.strip()),
        rules=tuple(r.strip() for r in rules.strip().split("\n") if r.strip()),
        example=example.strip("\n"),
    )


STYLE = [
    _d(
        "incident-writeup",
        "Write an incident write-up in the operations team's format (an 'Incident:' title, an 'Impact:' line, "
        "the sign-off 'Filed by the on-call engineer.'). Use when the user asks to write up, summarise or report "
        "an incident, a failure or a service disruption.",
        "Incident write-ups",
        "Incident write-ups are read by people outside the team, often on a phone, right after something broke. "
        "They must say what happened, who was affected and what was done, in the same order every time.",
        """
        Collect the facts first: start and end time, the affected service, how many users or requests failed.
        Write the title line: `Incident:` followed by the service and a few words on what failed.
        Write the `Impact:` line: who or what was affected, with a number when there is one.
        Then one to three lines of timeline, each starting with a UTC time as `HH:MM UTC`.
        Then one line starting with `Fix:` saying what restored service.
        End with the sign-off line.
        """,
        """
        The first line starts with `Incident:`.
        The second line starts with `Impact:`.
        Never write the word "outage": say "service disruption" instead, even when quoting the user.
        Times are in UTC, written `HH:MM UTC`.
        No blame: name systems and changes, never people.
        The last line is exactly `Filed by the on-call engineer.`
        """,
        """
        Incident: checkout API returned errors after a config deploy
        Impact: about 1,200 checkouts failed
        09:12 UTC errors start after the 09:10 UTC deploy
        09:40 UTC config rolled back, errors stop
        Fix: rolled back the config; a validation step was added to the deploy
        Filed by the on-call engineer.
        """,
    ),
    _d(
        "release-notes",
        "Write release notes in the product's format (a 'Release notes:' title with the version, one line per "
        "change starting with Added:, Fixed: or Changed:, the closing line 'Thanks for upgrading.'). Use when "
        "the user asks for release notes or a list of what changed in a version.",
        "Release notes",
        "Release notes are pasted unchanged into the changelog page, the app store and the upgrade e-mail, "
        "so their format is fixed and parsed by a script.",
        """
        Find the version number; ask for it if the user did not give one.
        Write the title line: `Release notes:` followed by the version, e.g. `Release notes: 2.4.0`.
        Sort the changes: new features first, then fixes, then changed behaviour.
        Write one line per change, starting with `Added:`, `Fixed:` or `Changed:`.
        Describe each change from the user's side, in at most fifteen words.
        End with the closing line.
        """,
        """
        The first line starts with `Release notes:` and contains the version.
        Every change line starts with `Added:`, `Fixed:` or `Changed:` (the script reads these prefixes).
        Never write "simply" or "just": they sound dismissive to users who had the bug.
        No internal ticket numbers and no names of colleagues.
        No bullets, no headings, no bold text.
        The last line is exactly `Thanks for upgrading.`
        """,
        """
        Release notes: 1.8.0
        Added: export any report as CSV
        Fixed: the login page no longer times out after 30 seconds
        Changed: the dashboard shows the last 7 days by default
        Thanks for upgrading.
        """,
    ),
    _d(
        "customer-email",
        "Write a reply to a customer in Northwind's support style (a 'Subject:' line, a 'Dear' greeting, the "
        "sign-off 'Best regards, Northwind Support'). Use when the user asks to answer, reply to or write to a "
        "customer about an order, a refund or a complaint.",
        "Customer e-mails",
        "Support replies go out under the company's name. Customers read them when something went wrong, so "
        "they must be short, specific and kind, and they must look the same whoever wrote them.",
        """
        Find the customer's order or invoice number and what they asked for.
        Write the subject line: `Subject:` followed by the order or invoice number and the topic.
        Greet the customer with `Dear` and their name, or `Dear customer,` when the name is unknown.
        Say in one sentence what we will do and by when.
        Add one sentence on what the customer needs to do, if anything.
        End with the sign-off line.
        """,
        """
        The first line starts with `Subject:`.
        The greeting starts with `Dear`.
        Never write "unfortunately": state what happens next instead.
        Quote order and invoice numbers exactly as the customer gave them.
        At most five sentences between the greeting and the sign-off.
        The last line is exactly `Best regards, Northwind Support`
        """,
        """
        Subject: order N-1187, late delivery
        Dear Ms Okafor,
        Your parcel left our warehouse today and will reach you by Friday.
        You do not need to do anything; the tracking link is in your account.
        Best regards, Northwind Support
        """,
    ),
]

#: The skill added mid-session; a task after the addition needs it.
ADDED = _d(
    "meeting-minutes",
    "Write meeting minutes in the team's format (a 'Minutes:' title, 'Decision:' and 'Action:' lines, the "
    "closing line 'Minutes end.'). Use when the user asks for minutes, notes or a summary of a meeting.",
    "Meeting minutes",
    "Minutes are the record of what a meeting decided and who does what next. They are searched later, so "
    "decisions and actions must be on lines of their own with fixed prefixes.",
    """
    Note the meeting's name and date.
    Write the title line: `Minutes:` followed by the meeting's name.
    Write one `Decision:` line per decision, in the order they were taken.
    Write one `Action:` line per task: the person's name, then what they will do.
    Leave out discussion that led to no decision or action.
    End with the closing line.
    """,
    """
    The first line starts with `Minutes:`.
    Every decision is a line starting with `Decision:`; every task a line starting with `Action:`.
    Never write "basically".
    Use first names only.
    No bullets and no headings.
    The last line is exactly `Minutes end.`
    """,
    """
    Minutes: weekly planning
    Decision: the beta starts on 3 May
    Action: Ana updates the roadmap
    Action: Li books the demo room
    Minutes end.
    """,
)

NEIGHBOURS = [
    _d(
        "pdf-form-filling",
        "Fill in PDF forms: read the form's fields, map the user's data onto them, write a filled copy and check "
        "it. Use when the user mentions a PDF form, an application form or fillable fields.",
        "Filling PDF forms",
        "Fillable PDFs hide their field names and formats; a value in the wrong format is silently dropped "
        "by many viewers, so every field is read back after writing.",
        """
        List the form's fields with `python scripts/list_fields.py form.pdf` (name, type, allowed values).
        Map each piece of the user's data to one field; write the mapping down as a JSON object.
        Convert dates to the format the field's tooltip gives, e.g. DD/MM/YYYY.
        Fill the form with `python scripts/fill.py form.pdf mapping.json filled.pdf`.
        Read the filled copy back and compare every field with the mapping.
        Report the fields left empty and why.
        """,
        """
        Never flatten the form unless the user asks: flattened fields cannot be corrected.
        Checkboxes take the export value the field lists, not "yes" or "true".
        Leave a field empty rather than guessing a value.
        Keep the original file; always write a new one.
        Signatures are never filled in by the agent.
        """,
        """
        {"applicant_name": "Mira Okafor", "date_of_birth": "04/11/1990", "citizen": "Yes"}
        """,
    ),
    _d(
        "git-commit-messages",
        "Write git commit messages in the Conventional Commits format with a short imperative subject and a "
        "wrapped body. Use when the user asks for a commit message, or to commit staged changes.",
        "Commit messages",
        "Commit subjects feed the generated changelog and the release tooling, which parse the type prefix.",
        """
        Read the staged diff with `git diff --cached --stat`, then the full diff of the largest files.
        Pick the type: feat, fix, docs, refactor, test, perf, build or chore.
        Add a scope in parentheses when the change is limited to one package.
        Write the subject in the imperative mood, at most 72 characters, no final period.
        Write a body that says why the change was made, wrapped at 72 columns.
        Add `BREAKING CHANGE:` as a footer when a public interface changed.
        """,
        """
        One logical change per commit: split the commit when the diff mixes two.
        Never mention the file names in the subject; the diff shows them.
        No emoji and no ticket numbers in the subject; put tickets in a `Refs:` footer.
        Do not commit generated files or secrets.
        Do not amend commits that were already pushed.
        """,
        """
        fix(parser): accept empty lines between records

        Exports from the old system put a blank line after every 100 records.
        Refs: DATA-412
        """,
    ),
    _d(
        "sql-query-review",
        "Review SQL queries for correctness, performance and safety (indexes, joins, NULL handling, injection). "
        "Use when the user shares a SQL query or asks why a query is slow or returns wrong rows.",
        "Reviewing SQL",
        "Most slow or wrong queries come from a handful of patterns; checking them in a fixed order finds them fast.",
        """
        Restate in one sentence what the query should return.
        Run `EXPLAIN` (or `EXPLAIN ANALYZE` on a copy) and look for sequential scans on large tables.
        Check every join condition: a missing condition multiplies rows.
        Check NULL handling in WHERE clauses and in NOT IN subqueries.
        Check that user input reaches the query only as bound parameters.
        Propose the fix as a complete query, then the index it needs, if any.
        """,
        """
        Never run a query that writes (UPDATE, DELETE, DDL) while reviewing.
        Prefer EXISTS to IN for correlated subqueries on large tables.
        Name the table and column for every index you propose.
        Say how many rows the fix should return when the user gave sample data.
        Mention the database (PostgreSQL, MySQL, SQLite): advice differs.
        """,
        """
        -- before: NOT IN returns no rows when any manager_id is NULL
        SELECT name FROM staff WHERE id NOT IN (SELECT manager_id FROM staff);
        -- after
        SELECT s.name FROM staff s
        WHERE NOT EXISTS (SELECT 1 FROM staff m WHERE m.manager_id = s.id);
        """,
    ),
    _d(
        "docker-debugging",
        "Debug Docker containers and images that fail to build, start or stay up (exit codes, logs, health "
        "checks, networking). Use when the user reports a container error or a failing Dockerfile.",
        "Debugging containers",
        "A container that fails says why in three places: its exit code, its logs and its health check.",
        """
        Get the state: `docker ps -a --filter name=NAME` and the exit code.
        Read the last 200 log lines: `docker logs --tail 200 NAME`.
        Exit code 137 means the container was killed, usually out of memory: check `docker inspect`.
        For build failures, rebuild with `--progress=plain --no-cache` from the failing step.
        For network problems, test from inside: `docker exec NAME wget -qO- http://service:port/health`.
        Write down the cause and the change that fixed it.
        """,
        """
        Never run `docker system prune` without asking: it deletes other projects' data.
        Do not add `--privileged` to make an error go away.
        Pin base image versions in fixes; never switch to `latest`.
        Keep secrets out of build arguments; they stay in the image history.
        Change one thing at a time and rebuild.
        """,
        """
        exit code 137, OOMKilled=true -> raised the memory limit from 256m to 512m
        """,
    ),
    _d(
        "python-unit-tests",
        "Write pytest unit tests for Python code: fixtures, parametrised cases, edge cases and failure paths. "
        "Use when the user asks for tests, more coverage, or a regression test for a bug.",
        "Writing unit tests",
        "A useful test fails for exactly one reason and names it; tests that only run code prove nothing.",
        """
        Read the function and list its behaviours: normal input, edge cases, errors it raises.
        Write one test per behaviour, named `test_<function>_<behaviour>`.
        Use `pytest.mark.parametrize` for the same check over several inputs.
        Use `tmp_path` for files and `monkeypatch` for environment variables.
        For a bug, first write the test that fails, then the fix.
        Run `pytest -q` and read every failure before changing anything.
        """,
        """
        Every test asserts something about the result; no test only calls the code.
        No sleeps: wait on a condition with a timeout instead.
        Do not mock the code under test; mock only slow or external systems.
        Keep each test under twenty lines; move setup into fixtures.
        Tests must pass in any order and in parallel.
        """,
        """
        @pytest.mark.parametrize("text,n", [("", 0), ("a b", 2), ("  a  ", 1)])
        def test_word_count_counts_words(text, n):
            assert word_count(text) == n
        """,
    ),
    _d(
        "csv-cleaning",
        "Clean messy CSV files: detect the delimiter and encoding, fix headers, types, dates and duplicates, "
        "and write a clean copy with a report. Use when the user gives a CSV or spreadsheet export to tidy up.",
        "Cleaning CSV files",
        "Exports from other tools differ in delimiter, encoding and date format; cleaning them by rule keeps "
        "the result reproducible.",
        """
        Detect encoding and delimiter from the first 64 KB; report them.
        Normalise headers to lowercase snake_case and keep a mapping from the old names.
        Infer each column's type from a sample; list values that do not fit.
        Parse dates into ISO 8601 (YYYY-MM-DD); say which format was detected.
        Remove exact duplicate rows and count them.
        Write `clean.csv` in UTF-8 with commas, and a short report of every change.
        """,
        """
        Never change the input file.
        Never drop a row silently: every dropped row is counted in the report.
        Ambiguous dates like 03/04/2024 are flagged, not guessed.
        Keep leading zeros in codes (postcodes, product codes): read them as text.
        Numbers with thousands separators are converted, and the separator is named.
        """,
        """
        order_date,customer_id,total_eur
        2024-03-04,00417,1250.00
        """,
    ),
    _d(
        "openapi-review",
        "Review an OpenAPI (Swagger) description for consistency, naming, error responses and breaking changes "
        "between versions. Use when the user shares an openapi.yaml or asks whether an API change is safe.",
        "Reviewing API descriptions",
        "Clients are generated from the API description, so a renamed field or a removed enum value breaks "
        "them even when the server still works.",
        """
        Validate the file with `npx @redocly/cli lint openapi.yaml` and list the errors first.
        Check naming: paths in kebab-case, fields in camelCase, plural collection names.
        Check that every operation documents 400, 401, 404 and 500 responses with one error schema.
        Compare with the previous version: removed paths, fields, enum values or new required fields break clients.
        Check examples against their schemas.
        Summarise: breaking changes first, then the rest.
        """,
        """
        A new required request field is a breaking change; a new optional one is not.
        Never suggest renaming a published field; suggest adding a new one and deprecating the old.
        Every list endpoint is paginated.
        Dates are strings with `format: date-time`.
        Name the exact path and line for every finding.
        """,
        """
        BREAKING  paths./orders.get.parameters.status: enum value "held" removed (line 214)
        """,
    ),
    _d(
        "accessibility-audit",
        "Audit a web page or component for accessibility against WCAG 2.2 AA (contrast, keyboard use, labels, "
        "headings, alt text). Use when the user asks whether a page is accessible or shares HTML to check.",
        "Accessibility audits",
        "Automated checkers find about a third of the problems; the rest need a keyboard and a screen reader.",
        """
        Run an automated check (axe-core) and list its findings with their WCAG criteria.
        Tab through the page: every control is reachable, visible when focused, and in a sensible order.
        Check that every form field has a programmatic label.
        Check heading levels: one h1, no skipped levels.
        Check images: meaningful ones have alt text, decorative ones have empty alt.
        Check colour contrast: 4.5:1 for text, 3:1 for large text and controls.
        """,
        """
        Cite the WCAG success criterion for every finding, e.g. 1.4.3 Contrast.
        Rank findings by impact on users, not by count.
        Never recommend an ARIA role where a native HTML element works.
        Give the fix as code, next to the element it changes.
        Say which checks need a human and were not done.
        """,
        """
        1.1.1 Non-text content: <img src="chart.png"> has no alt -> alt="Sales rose 12% in March"
        """,
    ),
    _d(
        "k8s-deployment",
        "Write and check Kubernetes deployment manifests (resources, probes, rollout strategy, config and "
        "secrets). Use when the user asks to deploy a service to Kubernetes or shares a manifest to review.",
        "Kubernetes deployments",
        "Most failed rollouts come from missing probes or resource limits; a checklist catches them before "
        "they reach the cluster.",
        """
        Start from the service's port, image tag and the environment variables it needs.
        Set requests and limits for CPU and memory; ask for measured numbers if there are none.
        Add a readiness probe on the health endpoint and a liveness probe with a longer delay.
        Use a RollingUpdate with maxUnavailable 0 for services that take traffic.
        Put configuration in a ConfigMap and credentials in a Secret, never in the manifest.
        Validate with `kubectl apply --dry-run=server -f deploy.yaml`.
        """,
        """
        Never use the `latest` tag: pin an exact version or digest.
        Every container has resource requests and limits.
        Run as a non-root user with a read-only root file system when the image allows it.
        Labels: app, version and team on every object.
        Do not apply to production; hand the manifest to the user.
        """,
        """
        readinessProbe: {httpGet: {path: /healthz, port: 8080}, periodSeconds: 5}
        """,
    ),
    _d(
        "translation-glossary",
        "Translate product text between English, German and French using the company glossary and tone rules. "
        "Use when the user asks to translate UI strings, help articles or marketing text.",
        "Translating product text",
        "Product terms must be translated the same way everywhere, or users think they are different features.",
        """
        Read `references/glossary.csv` and find every glossary term in the source text.
        Translate sentence by sentence, keeping placeholders like {name} and %d unchanged.
        Use the glossary translation for every term it lists.
        Match the register: formal (Sie, vous) for help articles, informal (du, tu) for the app.
        Check length: UI strings may be at most 30% longer than the English.
        List the terms you translated that are not in the glossary.
        """,
        """
        Never translate product names.
        Keep placeholders, HTML tags and keyboard shortcuts exactly as they are.
        Keep punctuation conventions of the target language (French spaces before : and ?).
        Do not add or drop information.
        Mark uncertain translations with [check].
        """,
        """
        en: "Save {count} files?"  de: "{count} Dateien speichern?"  fr: "Enregistrer {count} fichiers ?"
        """,
    ),
    _d(
        "invoice-extraction",
        "Extract fields from invoices (supplier, invoice number, dates, line items, VAT, totals) into JSON and "
        "check the arithmetic. Use when the user gives an invoice, a receipt or a bill to read or book.",
        "Extracting invoices",
        "Booked invoices must add up; an extraction that does not is wrong somewhere, even if every field "
        "looks plausible.",
        """
        Find the supplier's name, VAT number and address.
        Find the invoice number, invoice date and due date; write dates as YYYY-MM-DD.
        Extract each line item: description, quantity, unit price, VAT rate, line total.
        Recompute each line total and the invoice totals; flag any difference over 0.01.
        Write the result as JSON following `references/invoice.schema.json`.
        List fields that could not be read.
        """,
        """
        Amounts are numbers with two decimals, never strings with currency signs.
        The currency is a separate ISO 4217 field (EUR, USD).
        Never invent a missing field; use null.
        Keep the supplier's invoice number exactly, including leading zeros and dashes.
        Credit notes have negative totals.
        """,
        """
        {"invoice_number": "2024-0071", "date": "2024-05-02", "total": 119.0, "currency": "EUR"}
        """,
    ),
    _d(
        "code-review",
        "Review a code change (a diff or pull request) for bugs, security problems, tests and readability, "
        "with findings ranked by severity. Use when the user asks for a code review or feedback on a diff.",
        "Code review",
        "A review is useful when its first finding is the one that would have caused an incident.",
        """
        Read the description and the linked issue: what should the change do?
        Read the tests first: do they check the new behaviour and its failure paths?
        Read the diff file by file; note bugs, security issues, missing error handling.
        Check names, duplication and dead code last.
        Run the tests locally when you can.
        Write findings ranked blocker, major, minor, nit.
        """,
        """
        Every finding names the file and line and says why it matters.
        Suggest a fix for each blocker and major finding.
        Separate facts from taste: mark style preferences as nits.
        Do not rewrite the change; review it.
        Say what is good about the change too, in one line.
        """,
        """
        major  api/orders.py:88  the retry loop never stops when the server returns 400; retry only 5xx
        """,
    ),
    _d(
        "log-analysis",
        "Analyse application logs to find when an error started, how often it happens and what it correlates "
        "with. Use when the user shares log files or asks why errors appeared in a service.",
        "Analysing logs",
        "Logs answer three questions in order: when did it start, how often, and what changed at that time.",
        """
        Find the time range and the format of the log lines.
        Count errors per minute and find the first minute above the usual rate.
        Group errors by message template, replacing ids and numbers with placeholders.
        For the largest group, read ten full examples with their surrounding lines.
        Look for deploys, config reloads or restarts just before the start.
        Report the start time, the top three groups with counts, and the likely trigger.
        """,
        """
        Quote log lines exactly, with their timestamps.
        Remove personal data (e-mails, IP addresses, tokens) from quoted lines.
        Say which time zone the logs use.
        Never claim a cause without a line that shows it; say "likely" otherwise.
        Work on copies; never edit the original logs.
        """,
        """
        14:02 first timeout (rate 40/min, usual 0-1); group "db timeout after <n> ms": 1,913 lines
        """,
    ),
    _d(
        "slide-deck-outline",
        "Outline a slide deck from a brief: audience, one message per slide, speaker notes and timing. Use "
        "when the user asks for a presentation, slides or a talk outline.",
        "Slide deck outlines",
        "A deck works when each slide makes one point the audience remembers; the outline fixes those points "
        "before anyone designs a slide.",
        """
        Ask or infer the audience, the length of the talk and the one thing they should remember.
        Plan one slide per two minutes of talk.
        Write each slide as a headline sentence that states its point.
        Add at most three supporting items per slide.
        Add speaker notes of two or three sentences per slide.
        End with a slide that repeats the main message and the next step.
        """,
        """
        Headlines are full sentences, not topics ("Costs fell 12%", not "Costs").
        No slide has more than three items.
        Every number on a slide has its source in the speaker notes.
        Use the audience's words, not internal jargon.
        Keep the deck under fifteen slides unless asked otherwise.
        """,
        """
        Slide 3: "Support tickets halved after the new onboarding"  notes: source: helpdesk export, Q1 vs Q2
        """,
    ),
    _d(
        "chart-from-data",
        "Make a clear chart from tabular data with matplotlib: pick the chart type, label axes and units, and "
        "save a PNG. Use when the user asks for a chart, plot or graph of some numbers.",
        "Charts from data",
        "A chart should answer one question at a glance; the type follows from the question, not the data.",
        """
        State the question the chart answers in one sentence; it becomes the title.
        Pick the type: line for change over time, bar for comparing groups, scatter for relations.
        Load the data with pandas and check for missing values.
        Plot with matplotlib; label both axes with units.
        Start bar charts at zero; mark the data source under the chart.
        Save as PNG at 150 dpi and show the file path.
        """,
        """
        No pie charts for more than four groups.
        No 3D charts and no dual y-axes.
        Use one colour unless colour encodes a category.
        Round tick labels; show at most six ticks per axis.
        Put the legend inside the plot only if it hides no data.
        """,
        """
        plt.bar(df.region, df.sales_k_eur); plt.ylabel("sales (thousand EUR)"); plt.title("North sold most in Q2")
        """,
    ),
    _d(
        "secrets-scan",
        "Scan a repository or a diff for leaked secrets (API keys, passwords, private keys, tokens) and say how "
        "to rotate them. Use when the user asks whether code contains secrets or before publishing a repository.",
        "Scanning for secrets",
        "A secret that reached a git history is leaked even after it is deleted; the fix is rotation, not removal.",
        """
        Run `gitleaks detect --source . --report-format json --report-path leaks.json`.
        Also search the history: `gitleaks detect --log-opts="--all"`.
        For every finding, decide if it is a real secret, a test value or a false positive.
        For each real secret, name the service and how to rotate it.
        Add patterns for the project's own token formats to `.gitleaks.toml`.
        Report the findings without printing the secret values.
        """,
        """
        Never print a full secret: show the first four characters and the file and line.
        A secret in history must be rotated, not only deleted.
        Do not rewrite git history without the owner's consent.
        Treat `.env` files in the repository as findings.
        Test keys are findings too when they reach a shared environment.
        """,
        """
        config/settings.py:14  AWS access key AKIA**** (real) -> rotate in IAM, then remove
        """,
    ),
]


LAYOUT_NOTE = (
    "These instructions are the team's agreed way of doing this task. Follow them even when a user's request "
    "suggests a different format; if the request conflicts with a rule, follow the rule and say so in one line."
)


def body(s: SkillDef) -> str:
    """The skill's Markdown instructions, in the layout every skill of the collection shares."""
    steps = "\n".join(f"{i}. {x}" for i, x in enumerate(s.steps, 1))
    rules = "\n".join(f"- {x}" for x in s.rules)
    checks = "\n".join(f"- [ ] {x}" for x in s.rules)
    return (
        f"# {s.title}\n\n{s.purpose}\n\n{LAYOUT_NOTE}\n\n## Steps\n\n{steps}\n\n## Rules\n\n{rules}\n\n"
        f"## Example\n\n```\n{s.example}\n```\n\n## Before you finish\n\nCheck the result against each rule:\n\n"
        f"{checks}\n\n## More\n\n`references/notes.md` has background and past questions; read it only when "
        "a case is not covered above.\n"
    )


def write_skill(root: Path, s: SkillDef) -> Path:
    folder = root / s.name
    (folder / "references").mkdir(parents=True, exist_ok=True)
    desc = s.description.replace('"', '\\"')
    (folder / "SKILL.md").write_text(
        f'---\nname: {s.name}\ndescription: "{desc}"\nlicense: MIT\nmetadata:\n  version: "1.0"\n---\n\n{body(s)}',
        encoding="utf-8",
    )
    (folder / "references" / "notes.md").write_text(
        f"# {s.title}: background\n\n{s.purpose}\n\nPast questions: none recorded yet.\n", encoding="utf-8"
    )
    return folder


def house_style_description() -> str:
    """The example skill's description, read from its front matter."""
    import yaml

    text = (HOUSE_STYLE / "SKILL.md").read_text(encoding="utf-8")
    return str(yaml.safe_load(text.split("---")[1])["description"])


def install(root: Path) -> list[str]:
    """Write the twenty installed skills under ``root``: the example house style (copied from
    ``examples/skills``), the other style skills and the neighbours. Returns their names."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copytree(HOUSE_STYLE, root / HOUSE_STYLE.name, dirs_exist_ok=True)
    names = [HOUSE_STYLE.name]
    for s in [*STYLE, *NEIGHBOURS]:
        write_skill(root, s)
        names.append(s.name)
    return names


# -- tasks and their checks ------------------------------------------------------------


@dataclass(frozen=True)
class Task:
    skill: str
    prompt: str
    fact: str
    checks: dict[str, str] = field(default_factory=dict)


def _lines(text: str) -> list[str]:
    return [ln.strip() for ln in (text or "").strip().strip("`").strip().splitlines() if ln.strip()]


#: Per style skill, the rules checked by code: the title line's prefix, a line the layout requires
#: (a regular expression), what must not appear (a regular expression), the exact last line.
RULES: dict[str, dict[str, str]] = {
    "house-style": {"title": "Report:", "line": "- ", "banned": r"\*\*|^#", "last": "-- end"},
    "incident-writeup": {
        "title": "Incident:",
        "line": "Impact:",
        "banned": r"\boutage\b",
        "last": "Filed by the on-call engineer.",
    },
    "release-notes": {
        "title": "Release notes:",
        "line": "Added:|Fixed:|Changed:",
        "banned": r"\bsimply\b|\bjust\b",
        "last": "Thanks for upgrading.",
    },
    "customer-email": {
        "title": "Subject:",
        "line": "Dear ",
        "banned": r"\bunfortunately\b",
        "last": "Best regards, Northwind Support",
    },
    "meeting-minutes": {"title": "Minutes:", "line": "Decision:", "banned": r"\bbasically\b", "last": "Minutes end."},
}

TASKS = [
    Task(
        "house-style",
        "Write a short report on this week's website traffic: 12,400 visits, up 8% on last week; most visitors came from search.",
        "12,400",
    ),
    Task(
        "incident-writeup",
        "Write up yesterday's incident: the payments API returned errors from 09:12 to 09:47 UTC after a bad config deploy; about 1,900 card payments failed; we rolled the config back. It was a short outage.",
        "09:12",
    ),
    Task(
        "release-notes",
        "Write the release notes for version 2.4.0: a new CSV export, a fix for the login timeout, and the dashboard now simply loads twice as fast.",
        "2.4.0",
    ),
    Task(
        "customer-email",
        "Reply to the customer whose order N-5521 arrived damaged: we will send a replacement within 3 days.",
        "N-5521",
    ),
    Task(
        "house-style",
        "Give me a status update on the office move: the lease is signed, furniture arrives on 14 March, the network is not installed yet.",
        "14 March",
    ),
    Task(
        "incident-writeup",
        "Summarise last night's incident: the search cluster ran out of disk at 23:05 UTC, searches failed for 40 minutes, old indices were deleted to recover.",
        "23:05",
    ),
    Task(
        "release-notes",
        "Release notes for 3.1.2 please: fixed a crash when uploading empty files, and changed the default page size to 50.",
        "3.1.2",
    ),
    Task(
        "customer-email",
        "Write to the customer who asked about a refund for invoice 88-104: the refund is approved and arrives in 5 business days.",
        "88-104",
    ),
]

#: The task run after the addition: only the added skill says how to write it.
ADDED_TASK = Task(
    "meeting-minutes",
    "Write the minutes of today's planning meeting: we decided to ship on 2 June; Ana will update the roadmap; Li will book the venue.",
    "2 June",
)


def check(task: Task, answer: str | None) -> dict[str, bool]:
    """Each rule of the task's skill, checked on the answer: the title line, the structural
    line, the banned words (an empty answer gets no credit for avoiding them), the last line,
    and that the answer is about the task (its key fact)."""
    r = RULES[task.skill]
    lines = _lines(answer or "")
    text = "\n".join(lines)
    out = {
        "title": bool(lines) and lines[0].startswith(r["title"]),
        "structure": any(re.match(f"(?:{r['line'].strip()})", ln) for ln in lines[1:]),
        "banned_word_absent": bool(lines) and not re.search(r["banned"], text, re.I | re.M),
        "last_line": bool(lines) and lines[-1] == r["last"],
        "fact": task.fact in text,
    }
    if task.skill == "house-style":  # at most 3 bullets
        out["structure"] = 1 <= sum(ln.startswith("- ") for ln in lines) <= 3
    return out
