"""The read side: status, reports and their inputs and queries, the dashboard, health and doctor."""
