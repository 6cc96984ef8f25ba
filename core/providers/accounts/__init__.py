"""What the user's GPU cloud accounts offer, read-only: prices, availability, balance and the
user's own running instances at TensorPool, Lambda, Prime Intellect, Vast.ai and RunPod.

These are GPU cloud providers in the ordinary sense, not targets gpu-router runs jobs on: it
reads them to say what a job would cost elsewhere, and never creates, changes or deletes
anything there. Every request leaves through `readonly` (GET, or a POST of a GraphQL query
document), the one HTTP layer these modules have. Living under core/providers keeps the
dashboard and the CLI off them (tui/ never imports core.providers): they read accounts through
`core.engine.accounts`.
"""
