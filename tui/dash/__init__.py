"""The full-screen dashboard (`gpu dash`): targets, jobs, the log and the curves of one job."""
