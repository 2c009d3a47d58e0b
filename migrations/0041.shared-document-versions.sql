-- Issue 82. Every version of a shared document (the threat intelligence, GET /rules/intel) is
-- numbered by a serial kept here, and its content as item intervals: an item (a dataset
-- line, a block entry) is in every version from `since_serial` up to, not including,
-- `until_serial` (NULL: in the latest). Any process, on any host, after any restart, answers
-- a router's delta from any version kept (server/polling/versions.py), instead of only those
-- it built itself since it started. Versions are kept VERSIONS_KEPT_DAYS; items that left
-- before the oldest kept version go with them. Under Citus these stay on the coordinator.
CREATE TABLE document_versions (
    document  text         NOT NULL,
    serial    bigint       NOT NULL,
    etag      text         NOT NULL,
    made_at   timestamptz  NOT NULL,  -- when the state it was built from was read
    entries   integer      NOT NULL,
    PRIMARY KEY (document, serial)
);
CREATE INDEX document_versions_by_etag ON document_versions (document, etag, serial);
CREATE TABLE document_items (
    document      text    NOT NULL,
    place         text    NOT NULL,
    item          text    COLLATE "C" NOT NULL,
    since_serial  bigint  NOT NULL,
    until_serial  bigint
);
CREATE UNIQUE INDEX document_items_open ON document_items (document, place, item)
    WHERE until_serial IS NULL;
CREATE INDEX document_items_since ON document_items (document, since_serial);
CREATE INDEX document_items_until ON document_items (document, until_serial)
    WHERE until_serial IS NOT NULL;
