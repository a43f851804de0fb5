"""Word lists of the demo model's synthetic data (pure data, no logic).

Consumed by demo_domains.py. Pools that feed choice asks hold at least 26 entries where a choice may offer
26 options; each entry maps a canonical option name to the phrasings a state may use for it, so the model
has to learn synonyms rather than copy a word. Ordinal cue lists run low to high: a state shows one phrasing
of one bin, and score answers follow from the bin (demo_asks.ordinal_level).
"""

from __future__ import annotations

FIRST_NAMES = (
    "Ana", "Ben", "Chloé", "Dmitri", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonas", "Kofi", "Lena",
    "Mateo", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tariq", "Uma", "Victor", "Wen", "Ximena",
    "Yusuf", "Zoë", "Aiko", "Bruno", "Carmen", "Dev", "Emeka", "Freya", "Gustavo", "Hana", "Ivan", "Jia",
)
LAST_NAMES = (
    "Smith", "García", "Okafor", "Müller", "Tanaka", "Novak", "Haddad", "Kowalski", "Silva", "Chen", "Patel",
    "Johansson", "Rossi", "Dubois", "Kim", "Nguyen", "O'Brien", "Ivanova", "Mensah", "Larsen",
)

# product category -> how a ticket or review may name such a product
CATEGORIES = {
    "laptops": ("laptop", "notebook computer", "ultrabook"),
    "phones": ("phone", "smartphone", "mobile"),
    "headphones": ("headphones", "earbuds", "headset"),
    "cameras": ("camera", "DSLR", "mirrorless camera"),
    "printers": ("printer", "inkjet", "laser printer"),
    "monitors": ("monitor", "display", "screen"),
    "keyboards": ("keyboard", "mechanical keyboard"),
    "tablets": ("tablet", "e-reader"),
    "watches": ("smartwatch", "fitness tracker", "watch"),
    "speakers": ("speaker", "soundbar", "bluetooth speaker"),
    "routers": ("router", "wifi mesh", "modem"),
    "vacuums": ("vacuum", "robot vacuum", "hoover"),
    "blenders": ("blender", "food processor"),
    "coffee machines": ("coffee machine", "espresso maker", "coffee maker"),
    "bicycles": ("bike", "bicycle", "e-bike"),
    "shoes": ("shoes", "sneakers", "boots"),
    "jackets": ("jacket", "coat", "parka"),
    "backpacks": ("backpack", "rucksack", "daypack"),
    "mattresses": ("mattress", "memory foam bed"),
    "sofas": ("sofa", "couch", "sectional"),
    "lamps": ("lamp", "desk light", "floor lamp"),
    "tents": ("tent", "camping shelter"),
    "drones": ("drone", "quadcopter"),
    "guitars": ("guitar", "acoustic guitar", "electric guitar"),
    "microwaves": ("microwave", "microwave oven"),
    "toys": ("toy", "board game", "building set"),
    "books": ("book", "paperback", "hardcover"),
    "cookware": ("frying pan", "saucepan", "pot set"),
}
BRANDS = ("Vexo", "Lumina", "Kestrel", "Orbix", "Nimbus", "Tandem", "Qorra", "Halden", "Zephyr", "Brio")

# issue type -> sentences a customer may write ({p}: the product phrase, {o}: an order number)
ISSUES = {
    "refund": ("I want a refund for the {p} from order {o}.", "Please give me my money back for the {p}.",
               "Can you refund order {o}? The {p} is not what I expected.",
               "I returned the {p} and still have not been reimbursed."),
    "shipping delay": ("My {p} from order {o} still has not arrived.",
                       "Where is my {p}? The tracking has not moved.",
                       "Order {o} ({p}) was supposed to be delivered last week."),
    "damaged item": ("The {p} arrived broken.", "My {p} came with a cracked case.",
                     "The box was crushed and the {p} inside is damaged."),
    "wrong item": ("I ordered a {p} but received something else.", "Order {o} contained the wrong {p}.",
                   "You sent me a different {p} than the one I paid for."),
    "billing error": ("I was charged twice for the {p}.",
                      "My card was billed the wrong amount for order {o}.",
                      "There is an extra charge on my statement for the {p}."),
    "login problem": ("I cannot log in to my account to register the {p}.",
                      "My password reset link does not work.",
                      "The app keeps logging me out, so I cannot manage my {p}."),
    "setup help": ("How do I set up the {p}?", "I need help installing the {p}.",
                   "The manual for the {p} does not explain the first setup."),
    "cancellation": ("Please cancel order {o}.", "I want to cancel my {p} order before it ships.",
                     "Cancel the {p} I ordered yesterday, please."),
    "warranty claim": ("The {p} stopped working after five months; is it under warranty?",
                       "I would like to file a warranty claim for my {p}.",
                       "My {p} died and I believe the warranty covers it."),
    "feature request": ("It would be great if the {p} had a dark mode.",
                        "Please add an export option to the {p} app.",
                        "Could a future update of the {p} support voice control?"),
    "address change": ("I need to change the delivery address of order {o}.",
                       "Please ship the {p} to my new address instead.",
                       "Can I update where order {o} goes?"),
}
ISSUE_DESCRIPTIONS = {
    "refund": "money back", "shipping delay": "a late delivery", "damaged item": "something arrived broken",
    "wrong item": "received the wrong product", "billing error": "an incorrect charge",
    "login problem": "cannot access the account", "setup help": "how to install or configure",
    "cancellation": "cancel an order", "warranty claim": "repair or replacement under warranty",
    "feature request": "a suggestion for the product", "address change": "a new delivery address",
}

# urgency, low to high (8 bins)
URGENCY = (
    ("No rush at all.", "Whenever you get a chance."),
    ("It is not urgent.", "This can wait a few days."),
    ("I would appreciate a reply this week.", "A reply in the next few days would be nice."),
    ("Please look at this soon.", "I would like this sorted soon."),
    ("I need this resolved today.", "Please handle this today."),
    ("This is urgent.", "Urgent: please respond quickly."),
    ("This is very urgent, I need it within the hour.", "Extremely urgent, please act now."),
    ("EMERGENCY: this is blocking my whole business right now!",
     "Critical: everything is down until this is fixed!"),
)
URGENCY_LEVELS = (
    ("trivial", "very low", "low", "minor", "moderate", "notable", "high", "very high", "severe",
     "critical"),
    ("can wait indefinitely", "can wait weeks", "can wait days", "this week", "within two days",
     "by tomorrow", "today", "within hours", "within the hour", "immediately"),
)
# customer mood, calm to furious (7 bins); tickets with bin >= ANGRY_FROM count as angry
MOOD = (
    ("Thanks so much, you are all wonderful!", "I love your products, keep it up."),
    ("Thank you for your help.", "I appreciate your support."),
    ("Let me know what you need from me.", "Regards."),
    ("This is a bit annoying.", "I am slightly disappointed."),
    ("I am really frustrated with this.", "Honestly this is quite irritating."),
    ("I am angry about how this has been handled.", "This is unacceptable and I am upset."),
    ("I am absolutely furious!!", "This is outrageous, worst service ever!"),
)
ANGRY_FROM = 4
MOOD_LEVELS = (
    ("delighted", "very happy", "happy", "content", "neutral", "uneasy", "annoyed", "upset", "angry",
     "furious"),
    ("not upset at all", "barely upset", "slightly bothered", "a little unhappy", "unhappy", "displeased",
     "frustrated", "very frustrated", "angry", "livid"),
)
TICKET_NOISE = (
    "I have been a customer for years.", "My account email is the same as this one.", "Sent from my phone.",
    "I attached a photo.", "My neighbour had the same problem.", "The weather here has been awful.",
    "I tried restarting it twice.", "I already checked the FAQ.", "Please reply by email.",
    "My order number is in the subject.", "I bought it as a gift.", "Have a nice day.",
)

SERVICES = (
    "auth", "billing", "payments", "checkout", "search", "inventory", "cache", "db-primary", "db-replica",
    "queue", "scheduler", "notifications", "email-sender", "api-gateway", "cdn", "metrics", "logging",
    "storage", "image-resizer", "recommender", "geo", "session", "ledger", "fraud-check", "webhooks",
    "exporter", "indexer", "ratelimiter",
)
# log severity tags, low to high (8 bins)
SEVERITY_TAGS = (("DEBUG", "TRACE"), ("INFO",), ("NOTICE",), ("WARN", "WARNING"), ("ERROR", "ERR"),
                 ("CRITICAL", "CRIT"), ("ALERT",), ("FATAL", "EMERGENCY"))
ERROR_FROM = 4
SEVERITY_LEVELS = (
    ("negligible", "very low", "low", "minor", "moderate", "significant", "high", "very high", "severe",
     "catastrophic"),
    ("no impact", "cosmetic", "minimal", "limited", "noticeable", "degraded", "serious", "major", "critical",
     "total outage"),
)
CALM_EVENTS = ("request served in {n}ms", "cache hit ratio {n}%", "connected to peer", "heartbeat ok",
               "config reloaded", "processed {n} records", "rotated log file", "health check passed",
               "retrying connection (attempt {k})", "slow query took {n}ms", "queue depth {n}")
FAILURE_EVENTS = ("connection refused", "timeout after {n}ms", "out of memory", "disk full",
                  "null pointer exception", "permission denied", "certificate expired", "deadlock detected",
                  "unhandled exception", "segmentation fault")
JOB_NAMES = ("nightly-backup", "etl-orders", "deploy-web", "reindex", "billing-run", "report-gen",
             "sync-users", "cleanup-tmp", "build-images", "send-digest")
JOB_OK = ("job {j} finished OK", "job {j} completed successfully in {n}s", "{j}: exit code 0",
          "{j} done, all steps passed")
JOB_FAILED = ("job {j} failed", "{j}: exited with code {c}", "job {j} aborted after {k} retries",
              "{j} terminated with errors")

ASPECTS = {
    "battery": ("the battery dies fast", "battery life is poor", "it needs charging constantly"),
    "price": ("it is overpriced", "far too expensive for what it is", "the price is steep"),
    "shipping": ("delivery took forever", "it arrived late", "the courier lost it for a week"),
    "build quality": ("it feels flimsy", "the plastic creaks", "parts fell off"),
    "noise": ("it is very loud", "it makes a rattling noise", "the fan whines"),
    "size": ("it is bulkier than expected", "too small for me", "it does not fit"),
    "customer service": ("support never answered", "the help desk was rude", "nobody replied to my emails"),
    "instructions": ("the manual is useless", "setup instructions are confusing", "no instructions included"),
    "software": ("the app crashes", "the firmware is buggy", "updates break things"),
    "comfort": ("it is uncomfortable", "it hurts after an hour", "it pinches"),
    "smell": ("it smells of chemicals", "there is a strange odour", "a plastic smell that will not go away"),
    "color": ("the color is not as pictured", "it faded quickly", "the shade is off"),
    "durability": ("it broke within a month", "it wore out quickly", "it did not last"),
    "packaging": ("the packaging was wasteful", "the box was damaged", "too much plastic wrap"),
}
# review sentiment, negative to positive (10 bins); POSITIVE_FROM and above is positive
SENTIMENT = (
    ("Absolutely awful.", "A total disaster."), ("Terrible.", "Really bad."), ("Bad purchase.", "Poor."),
    ("Disappointing overall.", "Not good."), ("Mediocre.", "Meh, below average."),
    ("It is okay.", "Decent enough."), ("Pretty good.", "Solid."), ("Very good.", "Really nice."),
    ("Excellent!", "Great buy!"), ("Perfect, I love it!", "Outstanding, best purchase ever!"),
)
POSITIVE_FROM = 5
SENTIMENT_LEVELS = (
    ("very negative", "negative", "rather negative", "slightly negative", "mixed", "neutral",
     "slightly positive", "positive", "very positive", "glowing"),
    ("hates it", "strongly dislikes it", "dislikes it", "unimpressed", "lukewarm", "fine with it",
     "likes it", "really likes it", "loves it", "adores it"),
)
STAR_TEXT = ("Rating: {s}/5", "{s} out of 5 stars", "{s} stars", "Stars: {s}")

# tool -> what an agent's thought says when it needs that tool next
TOOLS = {
    "web_search": ("I should look this up online.", "Let me search the web for it."),
    "calculator": ("Now I need to add up these numbers.", "I have to compute the total."),
    "send_email": ("Next I should email the result to {n}.", "Time to send {n} a message by email."),
    "read_file": ("I need to open the file report.txt.", "Let me read the contents of notes.md."),
    "write_file": ("I should save this to a file.", "Let me write the draft to disk."),
    "run_sql": ("I need to query the orders table.", "Let me run a SQL query on the database."),
    "http_get": ("I should fetch that URL.", "Let me download the page at the link."),
    "calendar": ("I need to book a meeting with {n}.", "Let me put this on the calendar."),
    "translate": ("This text is in German; I need it in English.", "I should translate the reply to French."),
    "summarize": ("This document is long; I need a short summary.", "Let me condense this into key points."),
    "python": ("I should write a small script to process this.", "Let me run some Python code."),
    "shell": ("I need to run a command in the terminal.", "Let me list the directory with a shell command."),
    "weather": ("I need the forecast for tomorrow.", "Let me check whether it will rain."),
    "maps": ("I need directions to the venue.", "Let me find the route and travel time."),
    "stock_price": ("I need the current share price.", "Let me look up the stock quote."),
    "image_caption": ("I need to describe what is in this photo.", "Let me caption the attached image."),
    "spellcheck": ("I should fix the typos in the draft.", "Let me check the spelling."),
    "unit_convert": ("I need this in kilometres instead of miles.", "Let me convert pounds to kilograms."),
    "currency_convert": ("I need the amount in euros.", "Let me convert dollars to yen."),
    "slack_post": ("I should post an update in the team channel.", "Let me message the team on Slack."),
    "ticket_create": ("I should open a ticket for this bug.", "Let me file an issue in the tracker."),
    "git_commit": ("I should commit these changes.", "Let me commit the fix to the repository."),
    "pdf_extract": ("I need the text out of this PDF.", "Let me extract the tables from the PDF."),
    "ocr": ("This is a scanned page; I need its text.", "Let me read the text in the screenshot."),
    "contacts": ("I need {n}'s phone number.", "Let me look up {n} in the address book."),
    "reminder": ("I should set a reminder for Friday.", "Let me schedule a reminder to follow up."),
    "finish": ("Everything is done; I can give the final answer.", "The task is complete, time to reply."),
}
TOOL_DESCRIPTIONS = {
    "web_search": "search the internet", "calculator": "arithmetic", "send_email": "send an email",
    "read_file": "read a local file", "write_file": "write a local file", "run_sql": "query a database",
    "http_get": "fetch a URL", "calendar": "create calendar events", "translate": "translate text",
    "summarize": "shorten long text", "python": "run Python code", "shell": "run a shell command",
    "weather": "weather forecasts", "maps": "routes and places", "stock_price": "share prices",
    "image_caption": "describe an image", "spellcheck": "fix spelling", "unit_convert": "convert units",
    "currency_convert": "convert currencies", "slack_post": "post to Slack", "ticket_create": "file an issue",
    "git_commit": "commit code", "pdf_extract": "read PDFs", "ocr": "read text in images",
    "contacts": "look up people", "reminder": "set reminders", "finish": "give the final answer",
}
GOALS = ("Plan a team offsite for {n}", "Prepare the quarterly sales report",
         "Answer {n}'s question about refunds", "Fix the failing nightly build",
         "Book travel to the Berlin conference", "Summarize this week's support tickets",
         "Compare three laptop offers for {n}", "Draft the product launch email",
         "Clean up the customer database")
STEP_OK = ("returned {k} results", "ok", "success", "done, {k} rows", "200 OK", "saved")
STEP_ERROR = ("Error: timeout", "403 Forbidden", "Error: file not found", "failed: rate limited",
              "500 Internal Server Error", "Error: invalid arguments")
# progress, barely started to nearly done (8 bins)
PROGRESS = (
    ("Status: just getting started.", "Status: nothing done yet."),
    ("Status: very early.", "Status: barely begun."),
    ("Status: about a quarter of the way.", "Status: early progress."),
    ("Status: making headway.", "Status: some parts done."),
    ("Status: about halfway there.", "Status: half done."),
    ("Status: well past halfway.", "Status: most parts done."),
    ("Status: nearly finished.", "Status: almost there."),
    ("Status: only the last step remains.", "Status: one final step to go."),
)
PROGRESS_LEVELS = (
    ("not started", "barely started", "early", "some progress", "a third done", "half done", "mostly done",
     "nearly done", "almost complete", "final step"),
    ("0%", "10%", "20%", "30%", "40%", "50%", "60%", "70%", "85%", "95%"),
)

COUNTRIES = (
    "Argentina", "Australia", "Brazil", "Canada", "Chile", "Denmark", "Egypt", "Finland", "France", "Germany",
    "Ghana", "Greece", "India", "Indonesia", "Ireland", "Italy", "Japan", "Kenya", "Mexico", "Morocco",
    "Netherlands", "Nigeria", "Norway", "Peru", "Poland", "Portugal", "South Korea", "Spain", "Sweden",
    "Turkey", "Vietnam",
)
ORDER_STATUSES = ("pending", "paid", "packed", "shipped", "in transit", "delivered", "returned", "cancelled",
                  "on hold")
# order priority words, low to high (6 bins)
PRIORITIES = (("lowest", "p5"), ("low", "p4"), ("normal", "p3"), ("elevated", "p2"), ("high", "p1"),
              ("critical", "p0"))
PRIORITY_LEVELS = (
    ("lowest", "very low", "low", "below normal", "normal", "above normal", "elevated", "high", "very high",
     "top"),
    ("backlog", "someday", "later", "this month", "this week", "soon", "next up", "today", "now",
     "drop everything"),
)
ITEMS = ("usb cable", "phone case", "notebook", "mug", "charger", "t-shirt", "umbrella", "water bottle",
         "desk mat", "headband", "socks", "sticker pack")
