DROP TABLE document_items;
DROP TABLE document_versions;
