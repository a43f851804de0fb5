"""The five kinds of demo state and the asks each supports: support tickets, log excerpts, product reviews,
agent trajectories and JSON order records.

Each domain draws hidden facts with a seeded `random.Random`, renders them into a state (text with varied
wording, sentence order and noise sentences; records as a JSON object) and returns every ask it can pose
about them (demo_asks.Posed), at least one per ask type. Rules, stated once here, are what the answers
follow: a refund ticket is the one whose issue is "refund", a customer is angry from mood bin ANGRY_FROM, a
job failed exactly when a line at ERROR_FROM severity or above names the failed service, a review is
positive from sentiment bin POSITIVE_FROM, the next tool is the one the last thought asks for, and so on.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import demo_vocab as V
from demo_asks import Posed, choice, noul, score, yes_no_about

Domain = Callable[[random.Random], tuple[object, list[Posed]]]


def _name(rng: random.Random) -> str:
    return f"{rng.choice(V.FIRST_NAMES)} {rng.choice(V.LAST_NAMES)}"


def _pick(rng: random.Random, k: int, pool: tuple[str, ...]) -> list[str]:
    return rng.sample(pool, k)


def ticket(rng: random.Random) -> tuple[object, list[Posed]]:
    category = rng.choice(list(V.CATEGORIES))
    product = f"{rng.choice(V.BRANDS)} {rng.choice(V.CATEGORIES[category])}"
    issue = rng.choice(list(V.ISSUES))
    urgency, mood = rng.randrange(len(V.URGENCY)), rng.randrange(len(V.MOOD))
    order, customer = f"#{rng.randint(10000, 99999)}", _name(rng)
    sentences = [rng.choice(V.ISSUES[issue]).format(p=product, o=order), rng.choice(V.URGENCY[urgency]),
                 rng.choice(V.MOOD[mood]), *_pick(rng, rng.randint(0, 3), V.TICKET_NOISE)]
    rng.shuffle(sentences)
    if rng.random() < 0.5:
        greeting = rng.choice(("Hello,", "Hi team,", "Dear support,", "Hey,"))
        body = (f"{greeting} {' '.join(sentences)} "
                f"{rng.choice(('Thanks,', 'Best,', 'Cheers,', '--'))} {customer}")
        state = (f"Subject: {rng.choice(('Help', 'Problem', 'Question', 'Order ' + order, 'Re: my order'))}"
                 f"\n{body}")
    else:
        channel = rng.choice(("email", "chat", "phone", "web form"))
        state = (f"Ticket {rng.randint(100, 9999)} via {channel}\nCustomer: {customer}\n"
                 f"Message: {' '.join(sentences)}")

    asked_issue, same = yes_no_about(rng, issue, list(V.ISSUES))
    angry = mood >= V.ANGRY_FROM
    return state, [
        noul(rng.choice(("Is the customer asking for a refund?", "Does the customer want their money back?",
                         "Is this a refund request?")), issue == "refund"),
        noul(f"Is this ticket about {rng.choice((asked_issue, V.ISSUE_DESCRIPTIONS[asked_issue]))}?", same),
        noul(rng.choice((None, "Classify the ticket.")),
             same, {"true": f"the ticket is about {asked_issue}", "false": "it is about something else"}),
        noul(rng.choice(("Is the customer angry?", "Is the customer upset?",
                         "Does the customer sound angry?")), angry),
        noul(None, angry, {"true": "the customer is frustrated or angry", "false": "the customer is calm"}),
        choice(rng, rng.choice(("Which product category is this ticket about?", "What kind of product is it?",
                                None)), list(V.CATEGORIES), category),
        choice(rng, rng.choice(("What is the customer asking for?", "What type of request is this?",
                                "Route this ticket to the right queue.")),
               list(V.ISSUES), issue, V.ISSUE_DESCRIPTIONS),
        score(rng, rng.choice(("How urgent is this ticket?", "Rate the urgency.",
                               "How quickly must we reply?")),
              rng.choice(V.URGENCY_LEVELS), urgency, len(V.URGENCY)),
        score(rng, rng.choice(("How upset is the customer?", "Rate the customer's mood.")),
              rng.choice(V.MOOD_LEVELS), mood, len(V.MOOD)),
    ]


def log(rng: random.Random) -> tuple[object, list[Posed]]:
    job = rng.choice(V.JOB_NAMES)
    services = _pick(rng, rng.randint(2, 5), V.SERVICES)
    failed = rng.random() < 0.5
    worst = rng.randrange(V.ERROR_FROM, len(V.SEVERITY_TAGS)) if failed else rng.randrange(V.ERROR_FROM)
    culprit = rng.choice(services)
    hour, minute = rng.randrange(24), rng.randrange(60)

    def line(service: str, level: int, event: str) -> str:
        nonlocal minute
        minute = (minute + rng.randint(0, 3)) % 60
        fill = event.format(n=rng.randint(2, 900), k=rng.randint(1, 5))
        stamp = f"{hour:02d}:{minute:02d}:{rng.randrange(60):02d}"
        return f"{stamp} {rng.choice(V.SEVERITY_TAGS[level])} [{service}] {fill}"

    lines = [line(s, rng.randrange(min(worst + 1, V.ERROR_FROM)), rng.choice(V.CALM_EVENTS))
             for s in rng.choices(services, k=rng.randint(2, 5))]
    lines.insert(rng.randint(0, len(lines)), line(culprit, worst,
                                                  rng.choice(V.FAILURE_EVENTS if failed else V.CALM_EVENTS)))
    outcome = rng.choice(V.JOB_FAILED if failed else V.JOB_OK).format(j=job, n=rng.randint(3, 500),
                                                                         c=rng.choice((1, 2, 137, 255)),
                                                                         k=rng.randint(2, 5))
    lines.append(line("runner", worst if failed else min(worst, 1), outcome))  # never above the worst
    state = ("\n".join(lines) if rng.random() < 0.5
             else f"Log excerpt from host {rng.choice(('web', 'db', 'worker'))}-{rng.randint(1, 40)}:\n"
             + "\n".join(lines))

    asked, same = yes_no_about(rng, culprit, services)
    success_words = rng.choice(("Did the job succeed?", "Did the run complete without errors?",
                                f"Did {job} finish successfully?"))
    posed = [
        noul(rng.choice(("Did the job fail?", "Did the run fail?", f"Did {job} fail?")), failed),
        noul(success_words, not failed),
        noul(None, failed, {"true": "the job failed", "false": "the job succeeded"}),
        score(rng, rng.choice(("How severe is the worst event in this log?", "Rate the incident severity.",
                               "How bad is this?")),
              rng.choice(V.SEVERITY_LEVELS), worst, len(V.SEVERITY_TAGS)),
    ]
    if failed:
        posed += [
            choice(rng, rng.choice(("Which service failed?", "Which component caused the failure?",
                                    "Where did the error come from?")), list(V.SERVICES), culprit),
            noul(f"Did {asked} log the failure?", same),
        ]
    else:
        posed.append(choice(rng, rng.choice(("Which job is this log about?", "Which job ran here?")),
                            list(V.JOB_NAMES), job))
    return state, posed


def review(rng: random.Random) -> tuple[object, list[Posed]]:
    category = rng.choice(list(V.CATEGORIES))
    product = f"{rng.choice(V.BRANDS)} {rng.choice(V.CATEGORIES[category])}"
    stars = rng.randint(1, 5)
    sentiment = 2 * (stars - 1) + rng.randrange(2)
    aspect = rng.choice(list(V.ASPECTS))
    reviewer = rng.choice(V.FIRST_NAMES)
    opener = rng.choice(V.SENTIMENT[sentiment])
    parts = [f"Bought this {product} "
             f"{rng.choice(('last month', 'for my kid', 'as a replacement', 'on sale'))}.",
             f"My only complaint: {rng.choice(V.ASPECTS[aspect])}." if stars >= 3
             else f"Worst part: {rng.choice(V.ASPECTS[aspect])}."]
    if rng.random() < 0.5:
        parts.append(rng.choice(("Shipping was normal.", "I use it every day.",
                                 "My partner picked the model.", "Compared it with two others first.")))
    rng.shuffle(parts)
    header = rng.choice(V.STAR_TEXT).format(s=stars) if rng.random() < 0.7 else f"Review by {reviewer}"
    state = f"{header}\n{opener} {' '.join(parts)}"

    return state, [
        noul(rng.choice(("Is the review positive?", "Is the reviewer happy with the product?",
                         "Would the reviewer recommend it?")), sentiment >= V.POSITIVE_FROM),
        noul(rng.choice(("Is the review negative?", "Is the reviewer unhappy?")),
             sentiment < V.POSITIVE_FROM),
        noul(None, sentiment >= V.POSITIVE_FROM, {"true": "positive", "false": "negative"}),
        choice(rng, rng.choice(("What does the reviewer complain about?", "Which aspect is criticised?")),
               list(V.ASPECTS), aspect),
        choice(rng, rng.choice(("Which product category is reviewed?", "What kind of product is this?")),
               list(V.CATEGORIES), category),
        score(rng, rng.choice(("Rate the sentiment of this review.", "How positive is the review?",
                               "How does the reviewer feel about it?")),
              rng.choice(V.SENTIMENT_LEVELS), sentiment, len(V.SENTIMENT)),
    ]


def agent(rng: random.Random) -> tuple[object, list[Posed]]:
    person = rng.choice(V.FIRST_NAMES)
    goal = rng.choice(V.GOALS).format(n=person)
    tool = rng.choice(list(V.TOOLS))
    progress = rng.randrange(len(V.PROGRESS))
    last_ok = rng.random() < 0.6
    done = rng.sample([t for t in V.TOOLS if t != "finish"], rng.randint(1, 3))
    steps = []
    for k, t in enumerate(done, 1):
        ok = last_ok if k == len(done) else rng.random() < 0.8
        result = rng.choice(V.STEP_OK if ok else V.STEP_ERROR).format(k=rng.randint(1, 40))
        steps.append(f"Step {k}: {t}(...) -> {result}")
    thought = rng.choice(V.TOOLS[tool]).format(n=person)
    lines = [f"Goal: {goal}", *steps, rng.choice(V.PROGRESS[progress]), f"Thought: {thought}"]
    state = "\n".join(lines) if rng.random() < 0.5 else "Agent trajectory\n" + "\n".join(lines)

    return state, [
        choice(rng, rng.choice(("Which tool fits the next step?", "Which tool should the agent call next?",
                                "Pick the next action.")), list(V.TOOLS), tool, V.TOOL_DESCRIPTIONS),
        noul(rng.choice(("Did the last step succeed?", "Did the previous tool call work?")), last_ok),
        noul(rng.choice(("Did the last step fail?", "Should the agent retry the last step?")), not last_ok),
        noul(None, not last_ok, {"true": "the last tool call returned an error", "false": "it worked"}),
        noul(rng.choice(("Is the agent finished?", "Is the task complete?")), tool == "finish"),
        score(rng, rng.choice(("How far along is the agent?", "Rate the progress toward the goal.")),
              rng.choice(V.PROGRESS_LEVELS), progress, len(V.PROGRESS)),
    ]


def record(rng: random.Random) -> tuple[object, list[Posed]]:
    country = rng.choice(V.COUNTRIES)
    status = rng.choice(V.ORDER_STATUSES)
    priority = rng.randrange(len(V.PRIORITIES))
    fields = {
        "order_id": f"ORD-{rng.randint(1000, 99999)}",
        "customer": _name(rng),
        rng.choice(("country", "ship_to", "destination")): country,
        "status": status,
        "priority": rng.choice(V.PRIORITIES[priority]),
        "total": round(rng.uniform(3, 2000), 2),
    }
    if rng.random() < 0.6:
        fields["items"] = _pick(rng, rng.randint(1, 3), V.ITEMS)
    if rng.random() < 0.4:
        fields["currency"] = rng.choice(("USD", "EUR", "JPY", "GBP"))
    if rng.random() < 0.4:
        fields["notes"] = rng.choice(("gift wrap", "leave at door", "", "fragile", "call before delivery"))
    keys = list(fields)
    rng.shuffle(keys)
    state = {k: fields[k] for k in keys}

    asked, same = yes_no_about(rng, status, V.ORDER_STATUSES)
    return state, [
        noul(rng.choice(("Has the order been delivered?", "Did the order arrive?")), status == "delivered"),
        noul(rng.choice(("Was the order cancelled?", "Is this order cancelled?")), status == "cancelled"),
        noul(f"Is the order status {asked}?", same),
        noul(None, same, {"true": f"the order is {asked}", "false": f"the order is not {asked}"}),
        choice(rng, rng.choice(("Which country does this order ship to?", "Where is the order going?")),
               V.COUNTRIES, country),
        choice(rng, rng.choice(("What is the order's status?", "Which stage is the order in?")),
               V.ORDER_STATUSES, status),
        score(rng, rng.choice(("What priority does this order have?", "How important is this order?")),
              rng.choice(V.PRIORITY_LEVELS), priority, len(V.PRIORITIES)),
    ]


DOMAINS: dict[str, Domain] = {"ticket": ticket, "log": log, "review": review, "agent": agent,
                              "record": record}
