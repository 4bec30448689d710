-- The evaluation expectations an evaluation names (its golden's or scenario's
-- evaluation_expectations, as a JSON array): found by filter when an expectation is deleted.
ALTER TABLE evaluations ADD COLUMN evaluation_expectations TEXT NOT NULL DEFAULT '[]';
