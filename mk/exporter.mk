# SPDX-License-Identifier: Apache-2.0
# devq-exporter (client/exporter/): GET /metrics over libmicrohttpd for
# every devqd of the node.  Its own program and package (devq-metrics), so
# devctl links no HTTP library; both share the text builder client/promtext.c.
LIBS_MHD     = $(shell pkg-config --libs libmicrohttpd 2>/dev/null)
EXPORTER_SRC = client/exporter/exporter.c client/promtext.c

$(BUILD)/devq-exporter: $(call obj,$(EXPORTER_SRC)) $(BUILD)/libdevq.a
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LIBS_PB) $(LIBS_MHD) -lm

# test_promtext: the text builder alone, on statuses the test makes.
$(BUILD)/tests/test_promtext: $(call obj,tests/test_promtext.c client/promtext.c) $(BUILD)/libdevq.a
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LIBS_PB) $(LIBS_CK) -lm
