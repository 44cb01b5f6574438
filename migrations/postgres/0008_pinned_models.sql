-- Trials whose models `artifacts.keep_best` never removes (`hptune run --keep N`), kept with
-- the study: a later run of it, or another controller sharing it, protects them too. By trial
-- number, as the user names them, so a pin may name a trial that does not exist yet.

CREATE TABLE pinned_models (
    study_id   BIGINT NOT NULL REFERENCES studies (id) ON DELETE CASCADE,
    number     BIGINT NOT NULL,
    pinned_at  TEXT NOT NULL,
    PRIMARY KEY (study_id, number)
);
