"""A generated catalog of realistic tools, and queries phrased as a user would ask, for the
tool-search benchmark (``benchmarks/tool_search.py``).

Real catalogs (a few MCP servers: GitHub, Jira, Slack, a cloud provider, a CRM...) share their
words: every service can *create*, *list*, *get*, *update*, *delete* and *search* its objects, and
several services have "issues", "messages" or "users". The generator reproduces that: 25
domains, each with a few object types and the usual verbs plus the object's own actions
(merge a pull request, restart a pod, refund a charge), named in each service's own style
(``github.issues.create``, ``jira_issue_transition``, ``slack.chat.postMessage``,
``k8s-deployments-scale``), with parameter schemas built from the object's fields (camelCase
names, types, descriptions, required lists, enums, nested filter objects).

Each query targets one tool and is built from paraphrases -- "get rid of the Jira ticket",
"show me every open merge request in GitLab" -- never from the tool's name; a query names its
service in most cases but not always, as users do ("schedule a meeting with the design team").

Everything is drawn from ``random.Random(seed)``: the same seed gives the same catalog and the
same queries, byte for byte.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["DOMAINS", "Query", "ToolDef", "generate_catalog", "generate_queries", "scale_catalog"]


@dataclass(frozen=True)
class Obj:
    """An object type of a service: its name, what users also call it, what it is, its fields."""

    noun: str
    plural: str
    synonyms: tuple[str, ...]
    blurb: str
    fields: tuple[tuple[str, str, str], ...]  # (camelCase name, JSON type, description)
    verbs: tuple[str, ...]


@dataclass(frozen=True)
class Domain:
    key: str
    title: str
    style: str  # dotted | snake | camel | dash | verb_first
    cues: tuple[str, ...]  # how a user names the service in a request
    objects: tuple[Obj, ...]


def _f(spec: str) -> tuple[tuple[str, str, str], ...]:
    """``"name:type:description; ..."`` -> field tuples (keeps the tables below readable)."""
    out = []
    for part in spec.split(";"):
        name, kind, desc = (x.strip() for x in part.split(":", 2))
        out.append((name, kind, desc))
    return tuple(out)


_READ_VERBS = (
    "get",
    "list",
    "search",
    "query",
    "describe",
    "logs",
    "head",
    "stat",
    "read",
    "tree",
    "aggregate",
    "inspect",
)
CRUD = ("create", "get", "list", "update", "delete")
CRUDS = (*CRUD, "search")

DOMAINS: tuple[Domain, ...] = (
    Domain(
        "github",
        "GitHub",
        "dotted",
        ("on GitHub", "in our GitHub repo", "GitHub"),
        (
            Obj(
                "issue",
                "issues",
                ("bug report", "ticket", "feature request"),
                "a bug report or feature request tracked in a repository",
                _f(
                    "repo:string:Repository as owner/name; title:string:Short summary; body:string:Markdown text; labels:array:Label names; assignees:array:Logins of assignees"
                ),
                (*CRUDS, "close", "comment", "assign", "lock"),
            ),
            Obj(
                "pull request",
                "pulls",
                ("PR", "code review", "change request"),
                "a proposed set of commits to merge into a branch",
                _f(
                    "repo:string:Repository as owner/name; title:string:Title; head:string:Branch with the changes; base:string:Branch to merge into; draft:boolean:Open as a draft"
                ),
                (*CRUD, "merge", "comment", "request_review"),
            ),
            Obj(
                "repository",
                "repos",
                ("repo", "codebase", "project"),
                "a git repository hosted on the service",
                _f(
                    "owner:string:User or organization; name:string:Repository name; private:boolean:Visible only to members; description:string:One-line description"
                ),
                (*CRUDS, "fork", "archive"),
            ),
            Obj(
                "branch",
                "branches",
                ("git branch", "feature branch"),
                "a named line of development in a repository",
                _f(
                    "repo:string:Repository as owner/name; branchName:string:Name of the branch; fromRef:string:Commit or branch to start from"
                ),
                ("create", "list", "delete", "protect"),
            ),
            Obj(
                "release",
                "releases",
                ("version tag", "published version"),
                "a tagged, published version with release notes",
                _f(
                    "repo:string:Repository as owner/name; tagName:string:Git tag such as v1.2.0; notes:string:Release notes in Markdown; prerelease:boolean:Mark as a pre-release"
                ),
                ("create", "get", "list", "update", "delete", "publish"),
            ),
        ),
    ),
    Domain(
        "gitlab",
        "GitLab",
        "snake",
        ("in GitLab", "on our GitLab", "GitLab"),
        (
            Obj(
                "merge request",
                "merge_requests",
                ("MR", "code review"),
                "a request to merge one branch into another",
                _f(
                    "projectId:integer:Numeric project ID; sourceBranch:string:Branch with the changes; targetBranch:string:Branch to merge into; title:string:Title"
                ),
                (*CRUD, "merge", "approve", "rebase"),
            ),
            Obj(
                "pipeline",
                "pipelines",
                ("CI run", "build"),
                "a run of the project's CI/CD jobs",
                _f(
                    "projectId:integer:Numeric project ID; ref:string:Branch or tag to build; variables:object:CI variables as key/value pairs"
                ),
                ("create", "get", "list", "cancel", "retry"),
            ),
            Obj(
                "issue",
                "issues",
                ("ticket", "bug"),
                "a tracked problem or task in a project",
                _f(
                    "projectId:integer:Numeric project ID; title:string:Short summary; description:string:Details; labels:array:Labels; milestoneId:integer:Milestone to attach"
                ),
                (*CRUDS, "close"),
            ),
        ),
    ),
    Domain(
        "jira",
        "Jira",
        "snake",
        ("in Jira", "Jira", "on the Jira board"),
        (
            Obj(
                "issue",
                "issue",
                ("ticket", "story", "bug", "task"),
                "a unit of work in a Jira project",
                _f(
                    "projectKey:string:Project key such as OPS; summary:string:One-line summary; issueType:string:Bug, Story or Task; priority:string:Highest to Lowest; assigneeId:string:Account ID"
                ),
                (*CRUDS, "transition", "assign", "comment", "link"),
            ),
            Obj(
                "sprint",
                "sprint",
                ("iteration", "sprint cycle"),
                "a time-boxed iteration on a Scrum board",
                _f(
                    "boardId:integer:Board ID; name:string:Sprint name; startDate:string:ISO date; endDate:string:ISO date; goal:string:Sprint goal"
                ),
                ("create", "get", "list", "update", "start", "complete"),
            ),
            Obj(
                "project",
                "project",
                ("space", "board"),
                "a collection of issues with its own workflow",
                _f(
                    "projectKey:string:Project key; name:string:Project name; leadAccountId:string:Project lead; projectType:string:software or business"
                ),
                ("create", "get", "list", "update", "delete", "archive"),
            ),
        ),
    ),
    Domain(
        "linear",
        "Linear",
        "camel",
        ("in Linear", "Linear"),
        (
            Obj(
                "issue",
                "Issue",
                ("ticket", "task"),
                "a task tracked by a Linear team",
                _f(
                    "teamId:string:Team ID; title:string:Title; description:string:Markdown description; priority:integer:0 (none) to 4 (low); stateId:string:Workflow state"
                ),
                (*CRUDS, "archive"),
            ),
            Obj(
                "cycle",
                "Cycle",
                ("iteration", "sprint"),
                "a team's recurring work period",
                _f(
                    "teamId:string:Team ID; startsAt:string:ISO date; endsAt:string:ISO date; name:string:Optional name"
                ),
                ("create", "get", "list", "update"),
            ),
        ),
    ),
    Domain(
        "asana",
        "Asana",
        "dotted",
        ("in Asana", "Asana"),
        (
            Obj(
                "task",
                "tasks",
                ("to-do", "action item", "work item"),
                "a piece of work assigned to someone",
                _f(
                    "workspaceGid:string:Workspace; name:string:Task name; notes:string:Details; assigneeGid:string:Assignee; dueOn:string:Due date"
                ),
                (*CRUDS, "complete", "assign", "comment"),
            ),
            Obj(
                "project",
                "projects",
                ("board", "list of tasks"),
                "a set of tasks toward one goal",
                _f(
                    "workspaceGid:string:Workspace; name:string:Project name; color:string:Project color; teamGid:string:Owning team"
                ),
                (*CRUD, "archive"),
            ),
        ),
    ),
    Domain(
        "slack",
        "Slack",
        "dotted",
        ("on Slack", "in Slack", "Slack"),
        (
            Obj(
                "message",
                "chat",
                ("post", "note", "text"),
                "a message posted in a channel or thread",
                _f(
                    "channelId:string:Channel ID such as C024BE91L; text:string:Message text (mrkdwn); threadTs:string:Reply in this thread; unfurlLinks:boolean:Show link previews"
                ),
                ("postMessage", "update", "delete", "search", "schedule", "pin"),
            ),
            Obj(
                "channel",
                "conversations",
                ("room", "chat room", "group chat"),
                "a place where a workspace talks",
                _f(
                    "name:string:Channel name without #; isPrivate:boolean:Invite-only channel; topic:string:Channel topic; userIds:array:Members to invite"
                ),
                ("create", "list", "archive", "invite", "rename", "join"),
            ),
            Obj(
                "user",
                "users",
                ("member", "coworker", "colleague"),
                "a person in the Slack workspace",
                _f("userId:string:User ID; email:string:Email address; presence:string:auto or away"),
                ("get", "list", "lookupByEmail", "setPresence"),
            ),
            Obj(
                "reminder",
                "reminders",
                ("nudge", "reminder"),
                "a reminder Slackbot sends at a given time",
                _f(
                    "text:string:What to remind; time:string:When, such as 'in 15 minutes' or a Unix time; userId:string:Who to remind"
                ),
                ("create", "list", "delete", "complete"),
            ),
        ),
    ),
    Domain(
        "teams",
        "Microsoft Teams",
        "camel",
        ("in Teams", "on Microsoft Teams", "Teams"),
        (
            Obj(
                "message",
                "ChannelMessage",
                ("post", "chat message"),
                "a message in a Teams channel",
                _f(
                    "teamId:string:Team ID; channelId:string:Channel ID; content:string:HTML or text content; importance:string:normal, high or urgent"
                ),
                ("send", "list", "reply", "delete"),
            ),
            Obj(
                "meeting",
                "OnlineMeeting",
                ("video call", "call", "sync"),
                "an online meeting with a join link",
                _f(
                    "subject:string:Meeting title; startDateTime:string:ISO date-time; endDateTime:string:ISO date-time; attendees:array:Email addresses"
                ),
                ("create", "get", "list", "update", "cancel"),
            ),
        ),
    ),
    Domain(
        "calendar",
        "Google Calendar",
        "snake",
        ("on my calendar", "in Google Calendar", "calendar"),
        (
            Obj(
                "event",
                "events",
                ("meeting", "appointment", "calendar invite"),
                "an entry on a calendar, with time, place and guests",
                _f(
                    "calendarId:string:Calendar ID, 'primary' for the user's own; summary:string:Title; start:string:Start as ISO date-time; end:string:End as ISO date-time; attendees:array:Guest emails; location:string:Where"
                ),
                (*CRUDS, "rsvp", "move", "quickAdd"),
            ),
            Obj(
                "calendar",
                "calendars",
                ("shared calendar", "team calendar"),
                "a named calendar that holds events",
                _f("summary:string:Calendar name; timeZone:string:IANA time zone; description:string:What it is for"),
                ("create", "get", "list", "delete", "share"),
            ),
            Obj(
                "free busy",
                "freebusy",
                ("availability", "free time", "open slots"),
                "when people are free or busy",
                _f(
                    "timeMin:string:Start of the window; timeMax:string:End of the window; calendarIds:array:Calendars or people to check"
                ),
                ("query",),
            ),
        ),
    ),
    Domain(
        "email",
        "Gmail",
        "dotted",
        ("in Gmail", "by email", "my inbox", "email"),
        (
            Obj(
                "message",
                "messages",
                ("email", "mail", "inbox message"),
                "an email in the mailbox",
                _f(
                    "to:array:Recipient addresses; subject:string:Subject line; body:string:Plain text or HTML body; cc:array:Copy recipients; attachments:array:File IDs to attach"
                ),
                ("send", "get", "list", "search", "delete", "reply", "forward", "markRead"),
            ),
            Obj(
                "draft",
                "drafts",
                ("unsent email", "draft email"),
                "an email saved but not sent",
                _f("to:array:Recipient addresses; subject:string:Subject line; body:string:Body"),
                ("create", "get", "list", "update", "delete", "send"),
            ),
            Obj(
                "label",
                "labels",
                ("folder", "tag", "category"),
                "a label that groups emails",
                _f("name:string:Label name; color:string:Hex background color; messageIds:array:Emails to label"),
                ("create", "list", "delete", "apply"),
            ),
            Obj(
                "filter",
                "filters",
                ("mail rule", "inbox rule"),
                "a rule applied to incoming mail",
                _f(
                    "fromAddress:string:Match sender; hasWords:string:Match words; action:string:archive, label or delete"
                ),
                ("create", "list", "delete"),
            ),
        ),
    ),
    Domain(
        "drive",
        "Google Drive",
        "snake",
        ("in Drive", "on Google Drive", "in my Drive"),
        (
            Obj(
                "file",
                "files",
                ("document", "doc", "spreadsheet", "attachment"),
                "a file stored in Drive",
                _f(
                    "fileId:string:Drive file ID; name:string:File name; parentFolderId:string:Folder to put it in; mimeType:string:MIME type such as application/pdf"
                ),
                (*CRUDS, "upload", "download", "copy", "move", "share", "export"),
            ),
            Obj(
                "folder",
                "folders",
                ("directory",),
                "a folder that holds files",
                _f("name:string:Folder name; parentFolderId:string:Parent folder ID; color:string:Folder color"),
                ("create", "list", "delete", "share", "move"),
            ),
            Obj(
                "permission",
                "permissions",
                ("access", "sharing setting"),
                "who can view or edit a file",
                _f(
                    "fileId:string:Drive file ID; emailAddress:string:Who gets access; role:string:reader, commenter or writer"
                ),
                ("create", "list", "update", "delete"),
            ),
        ),
    ),
    Domain(
        "dropbox",
        "Dropbox",
        "snake",
        ("in Dropbox", "on Dropbox"),
        (
            Obj(
                "file",
                "files",
                ("document", "photo", "upload"),
                "a file in a Dropbox account",
                _f(
                    "path:string:Path such as /reports/q3.pdf; mode:string:add or overwrite; autorename:boolean:Rename on conflict"
                ),
                ("upload", "download", "list", "delete", "move", "copy", "search", "restore"),
            ),
            Obj(
                "shared link",
                "sharing",
                ("public link", "share link"),
                "a link others can open without an account",
                _f(
                    "path:string:File or folder path; expires:string:Expiry date; requirePassword:boolean:Protect with a password"
                ),
                ("create", "list", "revoke"),
            ),
        ),
    ),
    Domain(
        "fs",
        "local files",
        "verb_first",
        ("on disk", "in the workspace", "locally"),
        (
            Obj(
                "file",
                "file",
                ("text file", "source file"),
                "a file in the local workspace",
                _f(
                    "path:string:Path relative to the workspace; content:string:Text to write; encoding:string:Text encoding, utf-8 by default"
                ),
                ("read", "write", "delete", "move", "copy", "search", "stat"),
            ),
            Obj(
                "directory",
                "dir",
                ("folder",),
                "a directory in the local workspace",
                _f(
                    "path:string:Directory path; recursive:boolean:Include subdirectories; pattern:string:Glob such as *.py"
                ),
                ("list", "create", "delete", "tree"),
            ),
        ),
    ),
    Domain(
        "postgres",
        "PostgreSQL",
        "snake",
        ("in the database", "in Postgres", "in our PostgreSQL database", "in the DB"),
        (
            Obj(
                "query",
                "query",
                ("SQL statement", "SQL"),
                "a SQL statement run against the database",
                _f(
                    "sql:string:The SQL text; params:array:Positional parameters; timeoutMs:integer:Statement timeout in milliseconds; readOnly:boolean:Run in a read-only transaction"
                ),
                ("run", "explain"),
            ),
            Obj(
                "table",
                "table",
                ("relation", "schema"),
                "a table with its columns and indexes",
                _f(
                    "schemaName:string:Schema, public by default; tableName:string:Table name; columns:array:Column definitions"
                ),
                ("create", "list", "describe", "drop", "truncate"),
            ),
            Obj(
                "backup",
                "backup",
                ("dump", "snapshot"),
                "a copy of the database taken at one moment",
                _f(
                    "databaseName:string:Database; destination:string:Where to write the dump; compress:boolean:gzip the dump"
                ),
                ("create", "list", "restore", "delete"),
            ),
        ),
    ),
    Domain(
        "k8s",
        "Kubernetes",
        "dash",
        ("in Kubernetes", "on the cluster", "in k8s", "in the kube cluster"),
        (
            Obj(
                "pod",
                "pods",
                ("container", "workload instance"),
                "a group of containers running on a node",
                _f(
                    "namespace:string:Kubernetes namespace; podName:string:Pod name; container:string:Container in the pod; labelSelector:string:Such as app=web"
                ),
                ("get", "list", "delete", "logs", "exec", "restart"),
            ),
            Obj(
                "deployment",
                "deployments",
                ("service rollout", "app deployment"),
                "a declarative set of replicated pods",
                _f(
                    "namespace:string:Kubernetes namespace; deploymentName:string:Deployment name; replicas:integer:Number of pods; image:string:Container image"
                ),
                (*CRUD, "scale", "rollback", "restart"),
            ),
            Obj(
                "config map",
                "configmaps",
                ("configuration", "config"),
                "key/value configuration for pods",
                _f("namespace:string:Kubernetes namespace; name:string:ConfigMap name; data:object:Keys and values"),
                ("create", "get", "list", "update", "delete"),
            ),
            Obj(
                "node",
                "nodes",
                ("machine", "worker node", "server"),
                "a machine in the cluster",
                _f("nodeName:string:Node name; reason:string:Why (for cordon and drain)"),
                ("list", "get", "cordon", "drain"),
            ),
            Obj(
                "secret",
                "secrets",
                ("credential", "password", "token"),
                "sensitive configuration for pods",
                _f(
                    "namespace:string:Kubernetes namespace; name:string:Secret name; data:object:Keys and base64 values"
                ),
                ("create", "get", "list", "delete"),
            ),
        ),
    ),
    Domain(
        "s3",
        "Amazon S3",
        "dotted",
        ("in S3", "on AWS S3", "in the S3 bucket", "S3"),
        (
            Obj(
                "object",
                "objects",
                ("file", "blob", "upload"),
                "a file stored under a key in a bucket",
                _f(
                    "bucket:string:Bucket name; key:string:Object key (its path); contentType:string:MIME type; storageClass:string:STANDARD, GLACIER..."
                ),
                ("put", "get", "list", "delete", "copy", "presign", "head"),
            ),
            Obj(
                "bucket",
                "buckets",
                ("storage bucket", "container"),
                "a top-level container of objects",
                _f(
                    "bucket:string:Bucket name; region:string:AWS region such as eu-west-1; versioning:boolean:Keep old versions"
                ),
                ("create", "list", "delete", "setPolicy", "setLifecycle"),
            ),
        ),
    ),
    Domain(
        "ec2",
        "Amazon EC2",
        "camel",
        ("on EC2", "in AWS", "EC2"),
        (
            Obj(
                "instance",
                "Instances",
                ("virtual machine", "VM", "server", "box"),
                "a virtual server in AWS",
                _f(
                    "instanceId:string:Such as i-0abc; instanceType:string:Such as t3.micro; imageId:string:AMI ID; region:string:AWS region"
                ),
                ("run", "describe", "start", "stop", "reboot", "terminate"),
            ),
            Obj(
                "security group",
                "SecurityGroups",
                ("firewall rule", "firewall"),
                "inbound and outbound traffic rules",
                _f(
                    "groupId:string:Security group ID; port:integer:Port; cidr:string:Source range such as 10.0.0.0/8; protocol:string:tcp or udp"
                ),
                ("create", "describe", "delete", "authorizeIngress", "revokeIngress"),
            ),
            Obj(
                "volume",
                "Volumes",
                ("disk", "EBS volume", "drive"),
                "a block storage volume",
                _f("volumeId:string:Volume ID; sizeGiB:integer:Size in GiB; instanceId:string:Instance to attach to"),
                ("create", "describe", "attach", "detach", "delete", "snapshot"),
            ),
        ),
    ),
    Domain(
        "lambda",
        "AWS Lambda",
        "dash",
        ("on Lambda", "in AWS Lambda", "serverless"),
        (
            Obj(
                "function",
                "functions",
                ("serverless function", "handler", "lambda"),
                "code that runs on demand without servers",
                _f(
                    "functionName:string:Function name or ARN; runtime:string:Such as python3.12; memoryMb:integer:Memory in MB; payload:object:Event passed to the function"
                ),
                (*CRUD, "invoke", "publishVersion", "logs"),
            ),
        ),
    ),
    Domain(
        "stripe",
        "Stripe",
        "snake",
        ("in Stripe", "on Stripe", "in billing"),
        (
            Obj(
                "customer",
                "customers",
                ("client", "account", "buyer"),
                "a paying customer with saved payment methods",
                _f(
                    "customerId:string:Such as cus_123; email:string:Billing email; name:string:Full name; metadata:object:Your own key/value data"
                ),
                CRUDS,
            ),
            Obj(
                "invoice",
                "invoices",
                ("bill", "statement"),
                "a bill for what a customer owes",
                _f(
                    "customerId:string:Customer; invoiceId:string:Such as in_123; dueDate:string:ISO date; lineItems:array:Amounts and descriptions"
                ),
                (*CRUD, "send", "void", "pay", "finalize"),
            ),
            Obj(
                "subscription",
                "subscriptions",
                ("plan", "recurring payment", "membership"),
                "a recurring charge on a schedule",
                _f(
                    "customerId:string:Customer; priceId:string:Price such as price_123; quantity:integer:Seats; trialDays:integer:Free trial length"
                ),
                (*CRUD, "cancel", "pause", "resume"),
            ),
            Obj(
                "charge",
                "charges",
                ("payment", "card payment", "transaction"),
                "money taken from a card or account",
                _f(
                    "amount:integer:Amount in cents; currency:string:Three-letter ISO code; customerId:string:Customer; description:string:Shown on the statement"
                ),
                ("create", "get", "list", "refund", "capture"),
            ),
        ),
    ),
    Domain(
        "salesforce",
        "Salesforce",
        "dotted",
        ("in Salesforce", "in the CRM", "Salesforce"),
        (
            Obj(
                "lead",
                "leads",
                ("prospect", "potential customer"),
                "a person who may become a customer",
                _f(
                    "firstName:string:First name; lastName:string:Last name; company:string:Company; email:string:Email; leadSource:string:Web, Referral..."
                ),
                (*CRUDS, "convert"),
            ),
            Obj(
                "opportunity",
                "opportunities",
                ("deal", "sale", "pipeline deal"),
                "a potential sale with an amount and stage",
                _f(
                    "name:string:Deal name; accountId:string:Account; amount:number:Value; stageName:string:Prospecting to Closed Won; closeDate:string:Expected close date"
                ),
                (*CRUDS, "close"),
            ),
            Obj(
                "contact",
                "contacts",
                ("person", "customer contact"),
                "a person at a customer account",
                _f(
                    "firstName:string:First name; lastName:string:Last name; email:string:Email; phoneNumber:string:Phone; accountId:string:Account"
                ),
                CRUDS,
            ),
            Obj(
                "account",
                "accounts",
                ("company", "organization", "client company"),
                "a company you do business with",
                _f(
                    "name:string:Company name; industry:string:Industry; website:string:Website; annualRevenue:number:Revenue"
                ),
                CRUDS,
            ),
        ),
    ),
    Domain(
        "hubspot",
        "HubSpot",
        "camel",
        ("in HubSpot", "HubSpot"),
        (
            Obj(
                "contact",
                "Contact",
                ("lead", "person"),
                "a person in the marketing database",
                _f(
                    "email:string:Email; firstname:string:First name; lastname:string:Last name; lifecycleStage:string:subscriber, lead, customer"
                ),
                CRUDS,
            ),
            Obj(
                "deal",
                "Deal",
                ("opportunity", "sale"),
                "a sale moving through the pipeline",
                _f(
                    "dealName:string:Name; amount:number:Value; dealStage:string:Pipeline stage; closeDate:string:Expected close"
                ),
                (*CRUDS, "associate"),
            ),
            Obj(
                "email campaign",
                "Campaign",
                ("newsletter", "marketing email", "blast"),
                "a marketing email sent to a list",
                _f(
                    "campaignName:string:Name; listId:string:Recipient list; subject:string:Subject line; sendAt:string:When to send"
                ),
                ("create", "get", "list", "schedule", "send"),
            ),
        ),
    ),
    Domain(
        "zendesk",
        "Zendesk",
        "snake",
        ("in Zendesk", "in support", "in the help desk"),
        (
            Obj(
                "ticket",
                "tickets",
                ("support request", "customer complaint", "case"),
                "a customer's request for help",
                _f(
                    "subject:string:Subject; comment:string:First comment; requesterEmail:string:Customer email; priority:string:low, normal, high, urgent; status:string:new, open, pending, solved"
                ),
                (*CRUDS, "assign", "merge", "solve"),
            ),
            Obj(
                "macro",
                "macros",
                ("canned response", "saved reply"),
                "a saved set of actions and a reply",
                _f(
                    "title:string:Macro name; actions:array:Field changes to apply; ticketId:integer:Ticket to apply it to"
                ),
                ("create", "list", "apply", "delete"),
            ),
            Obj(
                "article",
                "articles",
                ("help center article", "FAQ", "knowledge base page"),
                "a help center page for customers",
                _f("sectionId:integer:Section; title:string:Title; body:string:HTML body; locale:string:Such as en-us"),
                (*CRUDS, "publish"),
            ),
        ),
    ),
    Domain(
        "notion",
        "Notion",
        "dotted",
        ("in Notion", "Notion"),
        (
            Obj(
                "page",
                "pages",
                ("doc", "note", "wiki page"),
                "a page of blocks in a workspace",
                _f(
                    "parentId:string:Parent page or database; title:string:Title; content:array:Blocks of content; icon:string:Emoji icon"
                ),
                (*CRUDS, "archive", "duplicate"),
            ),
            Obj(
                "database",
                "databases",
                ("table", "tracker"),
                "a collection of pages with properties",
                _f("parentId:string:Parent page; title:string:Title; properties:object:Property schema"),
                ("create", "get", "query", "update"),
            ),
            Obj(
                "comment",
                "comments",
                ("remark", "feedback"),
                "a comment on a page or discussion",
                _f("pageId:string:Page; discussionId:string:Reply in this thread; text:string:Comment text"),
                ("create", "list"),
            ),
        ),
    ),
    Domain(
        "confluence",
        "Confluence",
        "snake",
        ("in Confluence", "on the wiki", "Confluence"),
        (
            Obj(
                "page",
                "page",
                ("wiki page", "doc", "documentation"),
                "a wiki page in a space",
                _f(
                    "spaceKey:string:Space key; title:string:Title; bodyStorage:string:Body in storage format; parentPageId:string:Parent page"
                ),
                (*CRUDS, "move", "export"),
            ),
            Obj(
                "space",
                "space",
                ("wiki", "team space"),
                "a collection of pages for a team or project",
                _f("spaceKey:string:Space key; name:string:Space name; description:string:Description"),
                ("create", "get", "list", "archive"),
            ),
        ),
    ),
    Domain(
        "twilio",
        "Twilio",
        "camel",
        ("by SMS", "by text message", "with Twilio", "over the phone"),
        (
            Obj(
                "sms",
                "Message",
                ("text message", "text", "SMS message"),
                "a text message to a phone",
                _f(
                    "to:string:Phone number in E.164; from:string:Your Twilio number; body:string:Message text; mediaUrl:array:Image URLs (MMS)"
                ),
                ("send", "get", "list", "cancel"),
            ),
            Obj(
                "call",
                "Call",
                ("phone call", "voice call", "ring"),
                "a phone call placed through Twilio",
                _f(
                    "to:string:Phone number to call; from:string:Your Twilio number; twimlUrl:string:Instructions for the call; record:boolean:Record the call"
                ),
                ("create", "get", "list", "hangup"),
            ),
        ),
    ),
    Domain(
        "pagerduty",
        "PagerDuty",
        "snake",
        ("in PagerDuty", "PagerDuty", "on call"),
        (
            Obj(
                "incident",
                "incidents",
                ("outage", "alert", "page", "emergency"),
                "an event that pages the on-call engineer",
                _f(
                    "serviceId:string:Affected service; title:string:What is wrong; urgency:string:high or low; escalationPolicyId:string:Who gets paged"
                ),
                ("create", "get", "list", "acknowledge", "resolve", "escalate", "snooze"),
            ),
            Obj(
                "on-call schedule",
                "schedules",
                ("rotation", "on-call rota", "shift"),
                "who is on call and when",
                _f(
                    "scheduleId:string:Schedule; since:string:Start of the window; until:string:End of the window; userId:string:Person"
                ),
                ("get", "list", "override"),
            ),
        ),
    ),
    Domain(
        "datadog",
        "Datadog",
        "dotted",
        ("in Datadog", "Datadog", "in monitoring"),
        (
            Obj(
                "monitor",
                "monitors",
                ("alert rule", "alarm", "check"),
                "a rule that alerts when a metric crosses a threshold",
                _f(
                    "name:string:Monitor name; query:string:Metric query; threshold:number:Critical threshold; notifyChannels:array:Where to alert"
                ),
                (*CRUDS, "mute", "unmute"),
            ),
            Obj(
                "metric",
                "metrics",
                ("time series", "measurement", "graph"),
                "numeric measurements over time",
                _f(
                    "metricQuery:string:Such as avg:system.cpu.user{*}; fromTs:integer:Start, Unix seconds; toTs:integer:End, Unix seconds"
                ),
                ("query", "list", "submit"),
            ),
            Obj(
                "dashboard",
                "dashboards",
                ("board", "charts"),
                "a page of graphs and widgets",
                _f("title:string:Dashboard title; widgets:array:Widget definitions; layoutType:string:ordered or free"),
                CRUD,
            ),
            Obj(
                "log",
                "logs",
                ("log line", "application logs"),
                "log events sent by services",
                _f(
                    "query:string:Log search query; from:string:Start time; to:string:End time; indexes:array:Log indexes"
                ),
                ("search", "aggregate"),
            ),
        ),
    ),
    Domain(
        "sentry",
        "Sentry",
        "snake",
        ("in Sentry", "Sentry", "in error tracking"),
        (
            Obj(
                "error issue",
                "issues",
                ("crash", "exception", "error", "stack trace"),
                "a group of similar errors from an app",
                _f(
                    "organizationSlug:string:Organization; projectSlug:string:Project; issueId:string:Issue ID; status:string:resolved, ignored, unresolved"
                ),
                ("get", "list", "resolve", "ignore", "assign", "delete"),
            ),
            Obj(
                "release",
                "releases",
                ("deploy", "version"),
                "a version of an app that errors are tied to",
                _f(
                    "organizationSlug:string:Organization; version:string:Version string; projects:array:Projects in the release"
                ),
                ("create", "get", "list", "finalize"),
            ),
        ),
    ),
    Domain(
        "shopify",
        "Shopify",
        "camel",
        ("in Shopify", "in the store", "in our shop"),
        (
            Obj(
                "order",
                "Order",
                ("purchase", "sale", "checkout"),
                "a customer's purchase in the store",
                _f(
                    "orderId:integer:Order ID; customerEmail:string:Buyer email; lineItems:array:Products and quantities; financialStatus:string:paid, pending, refunded"
                ),
                (*CRUDS, "cancel", "fulfill", "refund"),
            ),
            Obj(
                "product",
                "Product",
                ("item", "listing", "merchandise"),
                "something the store sells",
                _f(
                    "title:string:Product name; bodyHtml:string:Description; vendor:string:Brand; price:number:Price; tags:array:Tags"
                ),
                (*CRUDS, "publish"),
            ),
            Obj(
                "inventory level",
                "InventoryLevel",
                ("stock", "quantity on hand"),
                "how many units are available at a location",
                _f(
                    "inventoryItemId:integer:Inventory item; locationId:integer:Warehouse or store; available:integer:Units available"
                ),
                ("get", "set", "adjust"),
            ),
            Obj(
                "discount code",
                "DiscountCode",
                ("coupon", "promo code", "voucher"),
                "a code that lowers the price at checkout",
                _f(
                    "code:string:The code customers type; percentOff:number:Percent off; usageLimit:integer:How many times it can be used; endsAt:string:Expiry"
                ),
                ("create", "get", "list", "delete"),
            ),
        ),
    ),
    Domain(
        "bamboohr",
        "BambooHR",
        "snake",
        ("in HR", "in BambooHR", "in the HR system"),
        (
            Obj(
                "employee",
                "employees",
                ("staff member", "worker", "team member", "hire"),
                "a person employed by the company",
                _f(
                    "employeeId:integer:Employee ID; firstName:string:First name; lastName:string:Last name; department:string:Department; jobTitle:string:Job title; hireDate:string:ISO date"
                ),
                (*CRUDS, "terminate"),
            ),
            Obj(
                "time off request",
                "time_off",
                ("vacation", "leave", "PTO", "holiday"),
                "a request to be away from work",
                _f(
                    "employeeId:integer:Employee; start:string:First day; end:string:Last day; timeOffType:string:vacation, sick, parental"
                ),
                ("create", "list", "approve", "deny", "cancel"),
            ),
        ),
    ),
    Domain(
        "docker",
        "Docker",
        "dash",
        ("in Docker", "with Docker", "Docker"),
        (
            Obj(
                "container",
                "containers",
                ("running app", "docker container"),
                "a running instance of an image",
                _f(
                    "containerId:string:Container ID or name; image:string:Image to run; ports:array:Port mappings such as 8080:80; env:object:Environment variables"
                ),
                ("run", "list", "stop", "remove", "logs", "inspect", "restart"),
            ),
            Obj(
                "image",
                "images",
                ("docker image", "build"),
                "a packaged filesystem and command to run",
                _f(
                    "imageName:string:Such as web:1.2; dockerfile:string:Path of the Dockerfile; context:string:Build context directory; registry:string:Registry to push to"
                ),
                ("build", "list", "pull", "push", "remove", "tag"),
            ),
        ),
    ),
    Domain(
        "ci",
        "CircleCI",
        "snake",
        ("in CI", "on CircleCI", "in the build system"),
        (
            Obj(
                "workflow",
                "workflows",
                ("pipeline", "build", "CI job"),
                "a set of jobs that builds and tests a commit",
                _f(
                    "projectSlug:string:Such as gh/acme/web; branch:string:Branch to build; workflowId:string:Workflow ID; parameters:object:Pipeline parameters"
                ),
                ("trigger", "get", "list", "cancel", "rerun"),
            ),
            Obj(
                "artifact",
                "artifacts",
                ("build output", "test report"),
                "a file a job saved",
                _f("projectSlug:string:Project; jobNumber:integer:Job number; path:string:Artifact path"),
                ("list", "download"),
            ),
        ),
    ),
    Domain(
        "weather",
        "weather service",
        "verb_first",
        ("weather", "the forecast"),
        (
            Obj(
                "forecast",
                "forecast",
                ("weather forecast", "outlook"),
                "expected weather for the coming days",
                _f(
                    "city:string:City name; latitude:number:Latitude; longitude:number:Longitude; days:integer:How many days ahead; units:string:metric or imperial"
                ),
                ("get",),
            ),
            Obj(
                "current weather",
                "current_weather",
                ("temperature", "conditions"),
                "weather right now at a place",
                _f("city:string:City name; units:string:metric or imperial"),
                ("get",),
            ),
            Obj(
                "weather alert",
                "weather_alerts",
                ("storm warning", "severe weather"),
                "official warnings for an area",
                _f("region:string:Region or country code; severity:string:minor to extreme"),
                ("list",),
            ),
        ),
    ),
    Domain(
        "maps",
        "Google Maps",
        "snake",
        ("on the map", "with Google Maps", "maps"),
        (
            Obj(
                "route",
                "directions",
                ("directions", "path", "way"),
                "how to get from one place to another",
                _f(
                    "origin:string:Start address; destination:string:End address; travelMode:string:driving, walking, transit; departureTime:string:When to leave"
                ),
                ("get",),
            ),
            Obj(
                "place",
                "places",
                ("location", "business", "venue", "restaurant"),
                "a point of interest with address and reviews",
                _f(
                    "query:string:What to look for; location:string:Around this point; radiusM:integer:Search radius in meters; placeId:string:Place ID"
                ),
                ("search", "get"),
            ),
            Obj(
                "address",
                "geocode",
                ("coordinates", "latitude and longitude"),
                "a street address and its coordinates",
                _f("address:string:Street address; latitude:number:Latitude; longitude:number:Longitude"),
                ("geocode", "reverse"),
            ),
        ),
    ),
)

#: verb -> (description sentence, paraphrases a user would say). ``{o}`` is the object noun,
#: ``{os}`` its plural, ``{t}`` the service's title, ``{b}`` the object's blurb.
VERBS: dict[str, tuple[str, tuple[str, ...]]] = {
    "create": (
        "Create a new {o} in {t}.",
        ("make a new {s}", "add a {s}", "set up a {s}", "start a new {s}", "I need a new {s}"),
    ),
    "get": (
        "Get one {o} by its ID, with all its details.",
        ("show me the details of the {s}", "look up a {s}", "fetch that {s}", "pull up the {s}"),
    ),
    "list": (
        "List the {os}, newest first, with paging.",
        ("show all the {ss}", "what {ss} do we have", "give me every {s}", "enumerate the {ss}"),
    ),
    "update": (
        "Update fields of an existing {o}.",
        ("change the {s}", "edit the {s}", "modify a {s}", "rename the {s}"),
    ),
    "delete": (
        "Delete an {o} permanently.",
        ("remove the {s}", "get rid of the {s}", "erase that {s}", "destroy the {s}"),
    ),
    "search": (
        "Search {os} by text and filters.",
        ("find {ss} mentioning the outage", "look for a {s} about billing", "which {ss} match 'login'"),
    ),
    "close": ("Close an {o} as done or not planned.", ("mark the {s} as done", "shut the {s}", "close out that {s}")),
    "comment": (
        "Add a comment to an {o}.",
        ("leave a remark on the {s}", "reply on the {s}", "write a note on the {s}"),
    ),
    "assign": (
        "Assign an {o} to a person.",
        ("give the {s} to Dana", "make Sam responsible for the {s}", "hand the {s} over to Lee"),
    ),
    "lock": (
        "Lock the conversation on an {o}.",
        ("stop people from commenting on the {s}", "freeze discussion of the {s}"),
    ),
    "merge": ("Merge an {o}.", ("land the {s}", "combine the {s} into main", "accept and merge the {s}")),
    "request_review": ("Request reviewers for an {o}.", ("ask Kim to review the {s}", "get someone to look at my {s}")),
    "fork": ("Fork an {o} into your account.", ("make my own copy of the {s}", "clone the {s} under my account")),
    "archive": (
        "Archive an {o}; it stays readable.",
        ("shelve the {s}", "put the {s} in the archive", "retire the {s}"),
    ),
    "protect": (
        "Protect an {o} against force pushes and deletion.",
        ("stop force pushes to the {s}", "guard the {s} from deletion"),
    ),
    "publish": (
        "Publish an {o} so others can see it.",
        ("make the {s} public", "go live with the {s}", "release the {s} to everyone"),
    ),
    "approve": ("Approve an {o}.", ("give my approval to the {s}", "sign off on the {s}", "OK the {s}")),
    "rebase": (
        "Rebase an {o} onto its target branch.",
        ("bring the {s} up to date with the target", "replay the {s} on top of main"),
    ),
    "cancel": ("Cancel an {o}.", ("call off the {s}", "stop the {s}", "abort the {s}")),
    "retry": ("Retry a failed {o}.", ("run the failed {s} again", "give the {s} another go")),
    "transition": (
        "Move an {o} to another workflow status.",
        ("move the {s} to In Progress", "change the status of the {s} to done"),
    ),
    "link": (
        "Link an {o} to another one (blocks, relates to).",
        ("mark the {s} as blocked by another one", "connect two {ss}"),
    ),
    "start": ("Start an {o}.", ("kick off the {s}", "begin the {s}")),
    "complete": ("Complete an {o}.", ("finish the {s}", "mark the {s} complete", "wrap up the {s}")),
    "postMessage": (
        "Post a message to a channel in {t}.",
        ("send a {s} to the team channel", "tell the channel the deploy is done", "write a {s} in the channel"),
    ),
    "schedule": ("Schedule an {o} to be sent later.", ("send the {s} tomorrow at 9", "queue a {s} for later")),
    "pin": ("Pin a message to a channel.", ("keep the {s} at the top of the channel", "stick the {s} to the channel")),
    "invite": ("Invite people to an {o}.", ("add Alex to the {s}", "bring new people into the {s}")),
    "rename": ("Rename an {o}.", ("give the {s} a new name", "call the {s} something else")),
    "join": ("Join an {o}.", ("become a member of the {s}", "enter the {s}")),
    "lookupByEmail": (
        "Find an {o} by email address.",
        ("who is jo@example.com", "find the {s} with this email address"),
    ),
    "setPresence": ("Set the {o}'s presence to away or auto.", ("mark me as away", "set my status to active")),
    "send": ("Send an {o}.", ("send a {s} to the client", "deliver the {s}", "fire off a {s}")),
    "reply": ("Reply to an {o}.", ("answer the {s}", "respond to that {s}")),
    "rsvp": (
        "Answer an invitation: accept, decline or maybe.",
        ("accept the {s}", "decline the {s}", "say I will attend the {s}"),
    ),
    "move": ("Move an {o} to another place or time.", ("reschedule the {s}", "relocate the {s}", "shift the {s}")),
    "quickAdd": (
        "Create an {o} from a sentence such as 'Lunch with Ana Friday 1pm'.",
        ("put lunch with Ana on Friday at 1pm", "add dinner tomorrow 7pm from text"),
    ),
    "share": ("Share an {o} with people.", ("give Maria access to the {s}", "let the team see the {s}")),
    "query": ("Query {os}.", ("when is everyone free on Tuesday", "check the {s} of the team", "query the {s}")),
    "forward": ("Forward an {o} to other recipients.", ("pass the {s} on to my manager", "send that {s} along to Pat")),
    "markRead": ("Mark {os} as read.", ("mark the {ss} as seen", "clear the unread {ss}")),
    "apply": ("Apply an {o}.", ("use the {s} on this one", "tag these with the {s}")),
    "upload": ("Upload a file as a new {o}.", ("put this {s} in the cloud", "store my {s} online")),
    "download": ("Download an {o}'s content.", ("save the {s} to my computer", "grab a copy of the {s}")),
    "copy": ("Copy an {o}.", ("duplicate the {s}", "make a copy of the {s}")),
    "export": (
        "Export an {o} to another format such as PDF.",
        ("turn the {s} into a PDF", "convert the {s} to another format"),
    ),
    "read": ("Read the text of an {o}.", ("show what is in the {s}", "open the {s} and print it")),
    "write": (
        "Write text to an {o}, creating it if needed.",
        ("save this text into a {s}", "overwrite the {s} with new content"),
    ),
    "stat": (
        "Get an {o}'s size, type and modification time.",
        ("how big is the {s}", "when was the {s} last modified"),
    ),
    "tree": ("Show a {o} tree recursively.", ("show the whole {s} hierarchy", "print the nested {s} structure")),
    "run": ("Run an {o}.", ("execute a {s}", "launch a {s}", "spin up a {s}")),
    "explain": (
        "Show the plan the database would use for an {o}.",
        ("why is this {s} slow", "show the execution plan of the {s}"),
    ),
    "describe": ("Describe an {o}.", ("show the columns of the {s}", "tell me about the {s}", "inspect the {s}")),
    "drop": ("Drop an {o} and its data.", ("remove the {s} with all its rows", "delete the {s} for good")),
    "truncate": (
        "Remove all rows from a {o}, keeping its structure.",
        ("empty the {s}", "clear out all rows in the {s}"),
    ),
    "restore": (
        "Restore the database from a {o}.",
        ("bring the database back from the {s}", "roll the data back to the {s}"),
    ),
    "logs": ("Get the logs of an {o}.", ("what did the {s} print", "show the output of the {s}", "tail the {s} logs")),
    "exec": ("Run a command inside a {o}.", ("open a shell in the {s}", "execute a command in the {s}")),
    "restart": ("Restart an {o}.", ("bounce the {s}", "reboot the {s}", "kick the {s}")),
    "scale": (
        "Change how many replicas an {o} runs.",
        ("run 5 copies of the {s}", "add more replicas to the {s}", "scale the {s} down to one"),
    ),
    "rollback": (
        "Roll an {o} back to its previous revision.",
        ("undo the last {s} rollout", "go back to the previous version of the {s}"),
    ),
    "cordon": ("Mark a {o} unschedulable.", ("stop new pods landing on the {s}", "take the {s} out of scheduling")),
    "drain": (
        "Evict every pod from a {o} before maintenance.",
        ("empty the {s} for maintenance", "move all workloads off the {s}"),
    ),
    "put": ("Upload an {o}.", ("store this {s}", "write a {s} to the bucket")),
    "presign": (
        "Create a time-limited URL for an {o}.",
        ("give me a temporary link to the {s}", "make a shareable expiring link for the {s}"),
    ),
    "head": ("Get an {o}'s metadata without its content.", ("check if the {s} exists", "how large is the {s}")),
    "setPolicy": ("Set the access policy of a {o}.", ("make the {s} private", "change who can read the {s}")),
    "setLifecycle": (
        "Set rules that expire or archive a {o}'s old objects.",
        ("auto-delete old files in the {s} after 30 days", "move old data in the {s} to cold storage"),
    ),
    "start_instance": ("Start a stopped {o}.", ("power on the {s}", "boot the {s}")),
    "stop": ("Stop a running {o}.", ("shut down the {s}", "power off the {s}", "halt the {s}")),
    "reboot": ("Reboot an {o}.", ("restart the {s}", "power cycle the {s}")),
    "terminate": (
        "Terminate an {o}.",
        ("permanently destroy the {s}", "let the {s} go for good", "decommission the {s}"),
    ),
    "authorizeIngress": (
        "Allow inbound traffic in a {o}.",
        ("open port 443 in the {s}", "let traffic in through the {s}"),
    ),
    "revokeIngress": (
        "Remove an inbound rule from a {o}.",
        ("close port 22 in the {s}", "block incoming traffic in the {s}"),
    ),
    "attach": ("Attach a {o} to an instance.", ("connect the {s} to the server", "mount the {s} on the machine")),
    "detach": ("Detach a {o} from its instance.", ("disconnect the {s} from the server", "unmount the {s}")),
    "snapshot": ("Take a snapshot of a {o}.", ("back up the {s}", "capture a point-in-time copy of the {s}")),
    "invoke": (
        "Invoke a {o} with a payload.",
        ("call the {s} with this event", "trigger the {s} now", "execute the {s}"),
    ),
    "publishVersion": (
        "Publish a new version of a {o}.",
        ("freeze the current code of the {s} as a version", "cut a numbered version of the {s}"),
    ),
    "void": ("Void an {o} so it can no longer be paid.", ("cancel the {s} without charging", "invalidate the {s}")),
    "pay": ("Pay an {o} now.", ("settle the {s}", "charge the customer for the {s}")),
    "finalize": ("Finalize an {o}.", ("lock in the {s}", "make the {s} final")),
    "pause": ("Pause an {o}.", ("put the {s} on hold", "temporarily halt the {s}")),
    "resume": ("Resume a paused {o}.", ("restart the paused {s}", "continue the {s}")),
    "refund": (
        "Refund an {o}.",
        ("give the customer their money back for the {s}", "reverse the {s}", "return the money for the {s}"),
    ),
    "capture": ("Capture an authorized {o}.", ("collect the authorized {s}", "take the held {s}")),
    "convert": (
        "Convert a {o} into an account, contact and opportunity.",
        ("turn the {s} into a customer", "the {s} is qualified, convert it"),
    ),
    "associate": (
        "Associate a {o} with a contact or company.",
        ("connect the {s} to a contact", "tie the {s} to a company"),
    ),
    "solve": ("Mark a {o} solved.", ("the customer's {s} is fixed, mark it solved", "close the {s} as resolved")),
    "duplicate": ("Duplicate a {o} with its content.", ("clone the {s}", "make another copy of the {s}")),
    "hangup": ("End an active {o}.", ("hang up the {s}", "end the {s}")),
    "acknowledge": ("Acknowledge an {o} so it stops escalating.", ("I'm on the {s}, ack it", "acknowledge the {s}")),
    "resolve": ("Resolve an {o}.", ("the {s} is fixed, resolve it", "mark the {s} resolved")),
    "escalate": (
        "Escalate an {o} to the next level.",
        ("page the next level about the {s}", "bump the {s} to the manager"),
    ),
    "snooze": ("Snooze an {o} for a while.", ("quiet the {s} for an hour", "delay the {s} notifications")),
    "override": ("Override an {o} for a time window.", ("cover someone's {s} on Saturday", "swap my {s} with Ana")),
    "mute": ("Mute a {o}.", ("silence the {s} during maintenance", "stop the {s} from notifying")),
    "unmute": ("Unmute a {o}.", ("turn the {s} back on", "re-enable notifications of the {s}")),
    "submit": ("Submit {o} points.", ("send custom {s} data points", "record a {s} value")),
    "aggregate": (
        "Aggregate {os} into counts or percentiles.",
        ("count {ss} by status code", "group the {ss} by service"),
    ),
    "ignore": ("Ignore an {o} until it happens again.", ("hide the {s} for now", "silence that {s}")),
    "fulfill": ("Fulfill an {o} and notify the customer.", ("ship the {s}", "mark the {s} as shipped")),
    "set": ("Set the {o} at a location.", ("set the {s} to 40 units", "the warehouse has 12 of these, update the {s}")),
    "adjust": ("Adjust the {o} by a positive or negative amount.", ("we sold 3, reduce the {s}", "add 10 to the {s}")),
    "deny": ("Deny a {o}.", ("reject the {s}", "turn down the {s}")),
    "remove": ("Remove an {o}.", ("delete the {s}", "get rid of the {s}")),
    "inspect": (
        "Show the low-level configuration of a {o}.",
        ("show the full config of the {s}", "what ports and env does the {s} have"),
    ),
    "build": ("Build an {o} from a Dockerfile.", ("package the app as an {s}", "make an {s} from the Dockerfile")),
    "pull": ("Pull an {o} from a registry.", ("fetch the {s} from the registry", "download the {s}")),
    "push": ("Push an {o} to a registry.", ("upload the {s} to the registry", "publish the {s} to the registry")),
    "tag": ("Tag an {o} with another name.", ("give the {s} another tag", "label the {s} as latest")),
    "trigger": ("Trigger a new {o} run.", ("kick off a {s} on main", "start a {s} for my branch")),
    "rerun": (
        "Rerun a {o} from the start or from failed jobs.",
        ("run the {s} again", "retry only the failed jobs of the {s}"),
    ),
    "revoke": ("Revoke a {o} so it stops working.", ("disable the {s}", "kill the {s} so nobody can use it")),
    "geocode": (
        "Turn an {o} into latitude and longitude.",
        ("where exactly is 10 Downing Street", "get the coordinates of this {s}"),
    ),
    "reverse": (
        "Find the {o} at given coordinates.",
        ("what street is at 48.85, 2.35", "which {s} is at these coordinates"),
    ),
}

#: Domain-specific overrides of the verb's query paraphrases where the general ones mislead.
_VERB_ALIAS = {("ec2", "start"): "start_instance"}

#: a query phrased as a question or a first-person statement gets no "please" in front
_QUESTION_WORDS = ("I ", "I'm", "what", "who", "which", "when", "where", "why", "how", "the ", "we ")


@dataclass(frozen=True)
class ToolDef:
    """One generated tool and what it was made from (the benchmark's ground truth)."""

    name: str
    domain: str
    noun: str
    verb: str
    tool: dict[str, Any]  # the OpenAI tool object


@dataclass(frozen=True)
class Query:
    id: str
    query: str
    expected: str  # the tool name


def _camel(words: str) -> str:
    parts = words.replace("-", " ").split()
    return parts[0].lower() + "".join(p[:1].upper() + p[1:] for p in parts[1:])


def _tool_name(domain: Domain, obj: Obj, verb: str) -> str:
    plural = obj.plural
    if domain.style == "dotted":  # github.issues.create
        return f"{domain.key}.{plural}.{verb}"
    if domain.style == "snake":  # jira_issue_transition
        return f"{domain.key}_{plural}_{verb}"
    if domain.style == "camel":  # linearCreateIssue
        return f"{domain.key}{verb[:1].upper()}{verb[1:]}{plural[:1].upper()}{plural[1:]}"
    if domain.style == "dash":  # k8s-deployments-scale
        return f"{domain.key}-{plural}-{verb}"
    return f"{verb}_{plural}"  # verb_first: read_file (a local tool, no service prefix)


def _param(kind: str, desc: str, rng: random.Random) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": kind, "description": desc}
    if kind == "array":
        schema["items"] = {"type": "string"}
    if kind == "object":
        schema["additionalProperties"] = {"type": "string"}
    if kind == "integer" and rng.random() < 0.3:
        schema["minimum"] = 0
    return schema


def _parameters(obj: Obj, verb: str, rng: random.Random) -> dict[str, Any]:
    fields = list(obj.fields)
    props: dict[str, Any] = {}
    required: list[str] = []
    id_name = _camel(obj.noun) + "Id"
    if verb in ("list", "search", "query", "aggregate"):
        if verb != "list":
            props["query"] = {"type": "string", "description": f"Text to match in {_plural(obj.noun)}"}
            required.append("query")
        props["filter"] = {
            "type": "object",
            "description": f"Only {obj.noun} records matching these fields",
            "properties": {name: _param(kind, desc, rng) for name, kind, desc in fields[:2]},
        }
        props["pageSize"] = {"type": "integer", "minimum": 1, "maximum": 100, "description": "Results per page"}
        props["cursor"] = {"type": "string", "description": "Page token from the previous call"}
    elif verb == "create" or verb in ("send", "postMessage", "run", "put", "upload", "build", "trigger", "write"):
        for name, kind, desc in fields:
            props[name] = _param(kind, desc, rng)
        required.extend(name for name, _, _ in fields[: max(1, len(fields) // 2)])
    else:
        owner = [f for f in fields if f[0].endswith(("Id", "Key", "Slug", "repo", "bucket", "namespace", "path"))][:1]
        for name, kind, desc in owner:
            props[name] = _param(kind, desc, rng)
            required.append(name)
        if id_name not in props:
            props[id_name] = {"type": "string", "description": f"ID of the {obj.noun}"}
            required.append(id_name)
        if verb == "update":
            for name, kind, desc in fields:
                props.setdefault(name, _param(kind, desc, rng))
        elif verb == "delete":
            props["force"] = {"type": "boolean", "description": "Skip the confirmation and delete dependents too"}
        else:
            extra = [f for f in fields if f[0] not in props]
            for name, kind, desc in rng.sample(extra, k=min(len(extra), rng.randint(0, 2))):
                props[name] = _param(kind, desc, rng)
    if rng.random() < 0.25:
        props["dryRun"] = {"type": "boolean", "description": "Validate the request without applying it"}
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


def _article(noun: str) -> str:
    return "an" if noun[:1].lower() in "aeiou" else "a"


def _description(domain: Domain, obj: Obj, verb: str, rng: random.Random) -> str:
    template = VERBS[_VERB_ALIAS.get((domain.key, verb), verb)][0]
    text = template.format(o=obj.noun, os=_plural(obj.noun), t=domain.title)
    text = text.replace(f"an {obj.noun}", f"{_article(obj.noun)} {obj.noun}").replace(
        f"a {obj.noun}", f"{_article(obj.noun)} {obj.noun}"
    )
    also = ", ".join(
        rng.sample(obj.synonyms, k=len(obj.synonyms))
    )  # an object is defined the same way on each of its tools
    blurb = f" {obj.noun[:1].upper()}{obj.noun[1:]}: {obj.blurb} (also called {also})."
    tails = (
        ["", " Paginated; pass the cursor from the previous page."]
        if verb in _READ_VERBS
        else [
            f" Requires a {domain.title} token with write access.",
            " Returns the changed object.",
        ]
    )
    return text + blurb + (rng.choice(tails) if rng.random() < 0.4 else "")


def generate_catalog(seed: int = 0) -> list[ToolDef]:
    """Every tool of every domain (about 600), in a fixed order; the seed varies descriptions
    and parameter details, never which tools exist."""
    rng = random.Random(seed)
    tools: list[ToolDef] = []
    for domain in DOMAINS:
        for obj in domain.objects:
            for verb in obj.verbs:
                name = _tool_name(domain, obj, verb)
                function = {
                    "name": name,
                    "description": _description(domain, obj, verb, rng),
                    "parameters": _parameters(obj, verb, rng),
                }
                tools.append(ToolDef(name, domain.key, obj.noun, verb, {"type": "function", "function": function}))
    names = [t.name for t in tools]
    assert len(set(names)) == len(names), "generated tool names must be unique"
    return tools


def _plural(word: str) -> str:
    if word.endswith(("s", "x", "ch", "sh")):
        return word + "es"
    if word.endswith("y") and word[-2:-1] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


def generate_queries(tools: list[ToolDef], n: int, seed: int = 0) -> list[Query]:
    """``n`` queries, each aimed at one tool (round-robin over a shuffled catalog, so most tools
    are asked for once): a paraphrase of the verb, the object or one of its synonyms, and the
    service's name in four queries out of five."""
    rng = random.Random(seed + 1)
    objects = {(d.key, o.noun): (d, o) for d in DOMAINS for o in d.objects}
    order = list(tools)
    rng.shuffle(order)
    queries: list[Query] = []
    for i in range(n):
        target = order[i % len(order)]
        domain, obj = objects[(target.domain, target.noun)]
        phrases = VERBS[_VERB_ALIAS.get((domain.key, target.verb), target.verb)][1]
        word = rng.choice((obj.noun, *obj.synonyms))
        phrase = rng.choice(phrases).format(s=word, ss=_plural(word))
        if not phrase.startswith(_QUESTION_WORDS):
            phrase = rng.choice(("", "please ", "can you ", "")) + phrase
        phrase = re.sub(r"\ba ([aeioAEIO])", r"an \1", phrase)
        if rng.random() < 0.8:
            cue = rng.choice(domain.cues)
            phrase = rng.choice((f"{phrase} {cue}", f"{cue}: {phrase}", f"{phrase} ({cue})"))
        queries.append(Query(f"q{i + 1:04d}", phrase, target.name))
    return queries


def scale_catalog(tools: list[ToolDef], n: int) -> list[dict[str, Any]]:
    """``n`` tool objects for the speed test: the catalog repeated under server prefixes
    (``srv7.github.issues.create``), as many connected servers of the same kinds would be."""
    out: list[dict[str, Any]] = []
    copy = 0
    while len(out) < n:
        for t in tools:
            if len(out) == n:
                break
            function = dict(t.tool["function"])
            if copy:
                function["name"] = f"srv{copy}.{function['name']}"
                function["description"] = f"[server {copy}] {function['description']}"
            out.append({"type": "function", "function": function})
        copy += 1
    return out


def to_jsonl(objects: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(o, ensure_ascii=False) + "\n" for o in objects)
