// The haystack of the needle test: plain prose written for this project (a year in a small
// harbour town), with no passphrases, codes or digits that could be mistaken for the needle.
// build_haystack() repeats it to any length.
#include "eval/needle_haystack.h"

namespace lancet {

const std::vector<std::string>& needle_filler_sentences() {
  static const std::vector<std::string> kSentences = {
      "The harbour town wakes slowly in early spring, when the fishing boats return from the winter moorings further south.",
      "Along the quay, the old warehouses have been turned into workshops where people mend nets, sails and the occasional bicycle.",
      "Most mornings begin with fog that rolls in from the bay and settles over the roofs until the sun is high enough to burn it away.",
      "The baker on the corner starts work long before dawn, and the smell of rye bread drifts down the hill toward the water.",
      "Children walk to school along the sea wall, counting the gulls that stand in a row on the railings as if waiting for a bus.",
      "In the square, a stone fountain has run without pause for as long as anyone can remember, fed by a spring in the hills above.",
      "The library keeps a shelf of tide tables and weather diaries that local sailors have written by hand over many generations.",
      "On market days, farmers bring cheese, apples and honey from the valley, and the stalls stretch all the way to the church steps.",
      "The lighthouse at the end of the breakwater was painted white and red last summer, and its lamp now turns a little faster than before.",
      "Evenings are quiet except for the rigging of the sailboats, which taps against the masts whenever the wind picks up.",
      "In late spring the meadows behind the town fill with clover, and beekeepers move their hives closer to the cliffs.",
      "A narrow railway climbs from the station through three tunnels to a village that grows potatoes and raises sheep.",
      "The conductor of the mountain train knows every passenger by name and waits patiently for anyone who is running late.",
      "Summer brings visitors who rent rooms above the shops and spend their days walking the coastal path from cove to cove.",
      "Swimmers gather at the small beach below the chapel, where the water stays calm even when the open sea is rough.",
      "At the boatyard, a family of shipwrights has been building wooden dinghies with the same tools their grandparents used.",
      "The planks are steamed in a long metal box until they bend, then clamped to the frames and left to dry for several days.",
      "Every August there is a regatta, and the whole town lines the harbour wall to cheer for boats that are mostly rowed by friends.",
      "When the festival ends, the lanterns are taken down and stored in the attic of the town hall until the next year.",
      "Autumn arrives with strong westerly winds that strip the leaves from the chestnut trees along the main road.",
      "The fishermen spend these weeks repairing their boats, scraping barnacles from the hulls and repainting the names on the bows.",
      "In the school, the older pupils keep a weather station on the roof and read the instruments every day at noon.",
      "The post office doubles as a small museum, with old maps of the coast and photographs of ships that once called at the port.",
      "A retired teacher gives walking tours that explain how the town grew around the natural shelter of the bay.",
      "She points out the houses built from the grey stone of the quarry, and the newer ones built from brick brought by rail.",
      "On clear nights in autumn, the sky above the headland is dark enough to see the faint band of the galaxy.",
      "Winter is the season of storms, and the harbour master raises flags on the signal mast to warn the boats to stay in port.",
      "Waves sometimes break over the sea wall and leave seaweed scattered across the road, which the council sweeps away each morning.",
      "Inside the cafes, people play cards, read the newspaper and talk about the price of fuel and the height of the tides.",
      "The choir practises in the chapel on Thursday evenings, and its songs can be heard faintly from the street outside.",
      "Snow is rare so close to the sea, but when it falls the children bring sledges down from their attics and race toward the park.",
      "The ferry to the island keeps running through most of the winter, although the crossing can take twice as long in heavy weather.",
      "On the island there is a single farm, a small school and a chapel, and the farmer's dogs greet every ferry that arrives.",
      "As the days lengthen again, the gardeners begin to turn the soil and plant beans, onions and rows of bright flowers.",
      "By the time the swallows return to nest under the eaves of the harbour office, the fishing boats are ready to sail once more.",
      "And so the year in the harbour town comes full circle, shaped by the weather, the tides and the patience of the people who live there.",
  };
  return kSentences;
}

}  // namespace lancet
